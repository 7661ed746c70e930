package act

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/crosstalk-project/crosstalk/internal/host"
)

// MSR access goes through /dev/cpu/N/msr, the msr driver's character device:
// an 8-byte pread or pwrite at offset = register number reads or writes that
// register on CPU N (arch/x86/kernel/msr.c). Through host.Host the same code
// reads and writes a captured tree or the simulator's, where the device is a
// regular file and the register the 8 bytes at that offset.

// msrPath is CPU cpu's MSR device.
func msrPath(cpu int) string { return "/dev/cpu/" + strconv.Itoa(cpu) + "/msr" }

// ReadMSR reads register reg of CPU cpu, little-endian as the driver returns it.
//
// On a tree that is not the live host, an empty stand-in (the capture
// convention for device nodes) reads as 0: the register's power-on value for
// IA32_CLOCK_MODULATION (modulation off). A real msr device never returns a
// short read: it returns 8 bytes or fails with EIO.
func ReadMSR(h *host.Host, cpu int, reg uint32) (uint64, error) {
	f, err := h.OpenFile(msrPath(cpu), os.O_RDONLY, 0)
	if err != nil {
		return 0, msrErr(h, cpu, reg, "read", err)
	}
	defer f.Close()
	var b [8]byte
	n, err := f.ReadAt(b[:], int64(reg))
	switch {
	case n == 8:
		return binary.LittleEndian.Uint64(b[:]), nil
	case n == 0 && errors.Is(err, io.EOF) && !h.IsLive():
		return 0, nil
	case err == nil || errors.Is(err, io.EOF):
		return 0, fmt.Errorf("MSR %#x on cpu %d: short read of %d bytes from %s", reg, cpu, n, h.Path(msrPath(cpu)))
	}
	return 0, msrErr(h, cpu, reg, "read", err)
}

// WriteMSR writes register reg of CPU cpu.
func WriteMSR(h *host.Host, cpu int, reg uint32, v uint64) error {
	f, err := h.OpenFile(msrPath(cpu), os.O_WRONLY, 0)
	if err != nil {
		return msrErr(h, cpu, reg, "write", err)
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	_, werr := f.WriteAt(b[:], int64(reg))
	cerr := f.Close()
	if werr != nil {
		return msrErr(h, cpu, reg, "write", werr)
	}
	if cerr != nil {
		return msrErr(h, cpu, reg, "write", cerr)
	}
	return nil
}

// msrErr turns the msr driver's errors into what an operator must do.
func msrErr(h *host.Host, cpu int, reg uint32, op string, err error) error {
	dev := h.Path(msrPath(cpu))
	var why string
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENXIO):
		why = "no such device: the msr module is not loaded (modprobe msr) or the CPU is offline"
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		why = "permission denied: MSR access needs root with CAP_SYS_RAWIO; writes are also refused under kernel lockdown and with msr.allow_writes=off"
	case errors.Is(err, unix.EIO):
		why = "the CPU refused the access (#GP): this register is not implemented here, or a hypervisor does not pass it through"
	default:
		why = err.Error()
	}
	return fmt.Errorf("%s MSR %#x on cpu %d (%s): %s: %w", op, reg, cpu, dev, why, err)
}

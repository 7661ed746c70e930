package sense

import (
	"context"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
)

// Tenant kinds.
const (
	KindVM        = "vm"        // a QEMU/KVM guest (libvirt, with or without systemd)
	KindPod       = "pod"       // a Kubernetes pod
	KindContainer = "container" // a docker, containerd or podman container outside Kubernetes
	KindCgroup    = "cgroup"    // any cgroup matched by a configured glob
)

// Tenant is one VM or container the agent watches: a cgroup and what runs in it.
type Tenant struct {
	// ID is stable for the tenant's lifetime: its cgroup path.
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Name is what an operator calls it: the VM's domain name, the pod's UID
	// (or namespace/name when known), the container's short ID.
	Name string `json:"name"`
	// Cgroup is the tenant's cgroup path below each hierarchy's root
	// ("/machine.slice/machine-qemu\x2d1\x2dvm1.scope").
	Cgroup string `json:"cgroup"`
	// CPUs it may run on (effective cpuset; all online CPUs when unconfined).
	CPUs cpuset.Set `json:"cpus"`
	// Threads are the thread IDs in the cgroup and its descendants (a VM's
	// vCPU threads live in vcpuN sub-cgroups).
	Threads []int `json:"-"`
	// UUID is a libvirt VM's domain UUID, set by LibvirtDiscoverer ("" for
	// other tenants, and for a VM libvirt does not report).
	UUID string `json:"uuid,omitempty"`
	// VCPUs is a libvirt VM's number of online vCPUs (0 when unknown).
	VCPUs int `json:"vcpus,omitempty"`
}

// Discoverer lists the tenants present now. Tenants appear and vanish at any
// time; a tenant that vanishes between listing and reading is not an error.
type Discoverer interface {
	Discover(ctx context.Context) ([]Tenant, error)
}

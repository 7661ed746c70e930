package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/libvirt"
	"github.com/crosstalk-project/crosstalk/internal/plan"
)

func newPlanCmd(g *globals) *cobra.Command {
	var (
		asJSON     bool
		reserve    string
		fromStatus bool
		policy     string
		fromLV     bool
		apply      bool
		lvSocket   string
	)
	cmd := &cobra.Command{
		Use:   "plan [SPEC.yaml]",
		Short: "Place VMs' vCPUs so virtual and physical topology agree, and print the libvirt XML",
		Long: `plan reads the host topology (the live machine, or --root DIR) and VM specs, pins
each VM's vCPUs by its policy, and prints a placement table, the topology checks
of the result, and per VM the libvirt XML to use: <memory>, <vcpu>, <cputune>
(<vcpupin>, <emulatorpin>), <numatune> and <cpu> (<topology>, <cache>, <numa>
cells, <maxphysaddr>). It changes nothing on the host.

Policies (after Faggioli, "Virtual Topology for VMs: Friend or Foe?", KVM Forum 2020):
  1to1      each vCPU on a CPU of its own that no other vCPU of any VM gets:
            whole cores, in one L3 domain if it fits, else one node, else as few
            nodes as possible, split evenly, with a virtual die per L3 and a cell
            per node. smt: true pins thread pairs to sibling pairs (threads=2);
            without it each vCPU gets a whole core and the sibling stays idle.
  per-llc   all vCPUs float over one L3 domain's CPUs (or equal shares over a
            few, a virtual die each): cache sharing stays consistent.
  per-node  all vCPUs float over one NUMA node's CPUs (or a cell per node).
  shared    vCPUs float over every CPU not reserved or dedicated to 1to1 VMs.
1to1 VMs are placed first; the others share what is left, and over-committed
pools are reported. --reserve keeps CPUs for the host and its emulator threads.

The spec is YAML; unknown keys are errors:

  reserve: "0,1"            # optional; --reserve overrides
  vms:
    - name: db              # libvirt domain name
      vcpus: 16
      memory: 64GiB         # KiB/MiB/GiB/TiB; a bare number is MiB
      policy: 1to1          # 1to1 | per-node | per-llc | shared
      smt: true             # expose sibling pairs as threads (1to1 only)
      cache: passthrough    # or emulate; default: whichever matches the
                            # host's glibc copy threshold best
      phys_bits: host       # auto (default) | host | default | 32-52

--from-status plans the domains running now instead, read from libvirt's status
files (/run/libvirt/qemu/*.xml under --root; no libvirt connection needed): it
prints their present topology checks, then the plan for them with --policy.
--from-libvirt does the same through the libvirt API (the socket under --root),
with each vCPU's live affinity, and --apply then pins the running domains live
(vcpupin and emulatorpin through libvirt, only what differs; a failed step
undoes the steps before it). Topology, NUMA cells and cache mode are not live
operations: put the printed XML in the domain's definition for its next boot.

Exit status: 0 planned (warnings included), 1 the VMs do not fit or the root is
unusable, 2 bad input.`,
		Example: `  crosstalk plan vms.yaml
  crosstalk plan --root testdata/hosts/amd-naples-2s vms.yaml --reserve 0,64
  crosstalk plan examples/plan.yaml --root testdata/hosts/amd-naples-2s --json | jq -r '.plan.vms[].xml'
  crosstalk plan --from-status --policy per-llc`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sources := 0
			for _, on := range []bool{fromStatus, fromLV, len(args) == 1} {
				if on {
					sources++
				}
			}
			if sources != 1 {
				return errors.New("give a spec file, --from-status or --from-libvirt (one of them)")
			}
			running := fromStatus || fromLV
			if policy != "" && !running {
				return errors.New("--policy is for --from-status and --from-libvirt; a spec gives each VM its policy")
			}
			if apply && !fromLV {
				return errors.New("--apply pins running domains through libvirt: use it with --from-libvirt")
			}
			h, err := g.openHost()
			if err != nil {
				return err
			}
			defer h.Close()
			hc, err := plan.ReadHost(h)
			if err != nil {
				return exitError{code: 1, err: err}
			}

			var spec *plan.Spec
			var current []*plan.Domain
			var currentChecks [][]plan.Check
			var loadErrs []string
			var live *libvirt.PlanSource
			if fromLV {
				log, err := g.logger()
				if err != nil {
					return err
				}
				sock := libvirt.SocketPath(h, lvSocket)
				if _, err := os.Stat(sock); err != nil {
					return exitError{code: 1, err: fmt.Errorf("no libvirt socket at %s (is libvirtd running? --libvirt-socket names another): %w", sock, err)}
				}
				ctx, cancel := context.WithCancel(cmd.Context())
				defer cancel()
				client := libvirt.New(libvirt.Options{Socket: libvirt.SocketPath(h, lvSocket), DialTimeout: 2 * time.Second, CallTimeout: 10 * time.Second, Log: log})
				done := make(chan struct{})
				go func() { client.Run(ctx); close(done) }()
				defer func() { cancel(); <-done }()
				wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
				err = client.WaitConnected(wctx)
				wcancel()
				if err != nil {
					return exitError{code: 1, err: fmt.Errorf("libvirt at %s: %w", libvirt.SocketPath(h, lvSocket), err)}
				}
				live = &libvirt.PlanSource{Client: client}
			}
			if running {
				pol := plan.Policy(policy)
				if pol == "" {
					pol = plan.OneToOne
				}
				var src plan.DomainSource = plan.StatusDir{Host: h}
				where := fmt.Sprintf("%s under %s", plan.StatusDirPath, h.Root())
				if live != nil {
					src, where = live, "libvirt"
				}
				doms, errs, err := plan.LoadDomains(cmd.Context(), src)
				if err != nil {
					return exitError{code: 1, err: err}
				}
				for _, e := range errs {
					loadErrs = append(loadErrs, e.Error())
					fmt.Fprintf(g.errOut, "crosstalk plan: skipping a domain: %v\n", e)
				}
				if len(doms) == 0 {
					return exitError{code: 1, err: fmt.Errorf("no running domains in %s", where)}
				}
				current = doms
				for _, d := range doms {
					currentChecks = append(currentChecks, plan.CheckDomain(hc, d))
				}
				spec = plan.SpecsFromDomains(doms, pol)
				if err := spec.Validate(); err != nil {
					return err
				}
			} else {
				data, err := os.ReadFile(args[0])
				if err != nil {
					return err
				}
				if spec, err = plan.Parse(data, args[0]); err != nil {
					return err
				}
			}
			if reserve == "" {
				reserve = spec.Reserve
			}
			res, err := cpuset.Parse(reserve)
			if err != nil {
				return fmt.Errorf("--reserve: %w", err)
			}
			p, err := plan.Make(hc, spec, res)
			if err != nil {
				return exitError{code: 1, err: err}
			}

			var applied []plan.Applied
			if apply {
				applied, err = plan.Apply(cmd.Context(), live, p, current, hc.Topo.Online)
				if err != nil {
					return exitError{code: 1, err: fmt.Errorf("applying the plan: %w", err)}
				}
			}
			if asJSON {
				out := planJSON{Host: hostJSON(hc), Plan: p, Warnings: append(hc.Warnings, loadErrs...), Applied: applied}
				for i, d := range current {
					out.Current = append(out.Current, domainChecksJSON{Name: d.Name, Source: d.Source, Checks: currentChecks[i]})
				}
				enc := json.NewEncoder(g.out)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			if current != nil {
				from := "--from-status"
				if fromLV {
					from = "--from-libvirt"
				}
				fmt.Fprintf(g.out, "crosstalk plan %s — %s\n\nTOPOLOGY CHECKS OF THE RUNNING DOMAINS\n", from, plan.HostLine(hc))
				if err := plan.WriteDomainChecks(g.out, current, currentChecks); err != nil {
					return err
				}
				fmt.Fprintf(g.out, "\nPLAN FOR THEM (policy %s)\n\n", spec.VMs[0].Policy)
			}
			if err := plan.WriteText(g.out, hc, p); err != nil {
				return err
			}
			if apply {
				fmt.Fprintf(g.out, "\nAPPLIED LIVE (%d change(s))\n", len(applied))
				for _, a := range applied {
					what := fmt.Sprintf("vCPU %d", a.VCPU)
					if a.VCPU < 0 {
						what = "emulator"
					}
					fmt.Fprintf(g.out, "  %s %s: %s -> %s\n", a.Domain, what, a.From, a.To)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the plan as JSON")
	cmd.Flags().StringVar(&reserve, "reserve", "", "CPUs kept for the host and emulator threads, e.g. `0,1` or 0,64 (never given to vCPUs)")
	cmd.Flags().BoolVar(&fromStatus, "from-status", false, "plan the running domains, read from libvirt's status files under --root")
	cmd.Flags().StringVar(&policy, "policy", "", "policy for --from-status/--from-libvirt: 1to1 (default), per-llc, per-node or shared")
	cmd.Flags().BoolVar(&fromLV, "from-libvirt", false, "plan the running domains, read through the libvirt API (with their live vCPU affinity)")
	cmd.Flags().BoolVar(&apply, "apply", false, "with --from-libvirt: pin the running domains live as planned (vcpupin, emulatorpin)")
	cmd.Flags().StringVar(&lvSocket, "libvirt-socket", "/run/libvirt/libvirt-sock", "libvirt's socket, below --root")
	return cmd
}

type planJSON struct {
	Host     hostSummary        `json:"host"`
	Current  []domainChecksJSON `json:"current,omitempty"`
	Plan     *plan.Plan         `json:"plan"`
	Warnings []string           `json:"warnings,omitempty"`
	// Applied lists the live pinning changes --apply made.
	Applied []plan.Applied `json:"applied,omitempty"`
}

type hostSummary struct {
	Hostname       string `json:"hostname,omitempty"`
	CPUs           int    `json:"cpus"`
	Cores          int    `json:"cores"`
	ThreadsPerCore int    `json:"threads_per_core"`
	NUMANodes      int    `json:"numa_nodes"`
	L3Domains      int    `json:"l3_domains"`
	PhysBits       int    `json:"phys_bits,omitempty"`
}

type domainChecksJSON struct {
	Name   string       `json:"name"`
	Source string       `json:"source"`
	Checks []plan.Check `json:"checks"`
}

func hostJSON(hc *plan.Host) hostSummary {
	t := hc.Topo
	return hostSummary{Hostname: hc.Hostname, CPUs: t.Online.Len(), Cores: t.Cores(), ThreadsPerCore: max(t.SMT, 1),
		NUMANodes: len(t.Nodes), L3Domains: len(t.CacheLevel(3)), PhysBits: hc.PhysBits}
}

package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/crosstalk-project/crosstalk/internal/cpuset"
	"github.com/crosstalk-project/crosstalk/internal/plan"
)

func newPlanCmd(g *globals) *cobra.Command {
	var (
		asJSON     bool
		reserve    string
		fromStatus bool
		policy     string
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
Applying a plan live (vcpupin through libvirt) is not part of this command yet.

Exit status: 0 planned (warnings included), 1 the VMs do not fit or the root is
unusable, 2 bad input.`,
		Example: `  crosstalk plan vms.yaml
  crosstalk plan --root testdata/hosts/amd-naples-2s vms.yaml --reserve 0,64
  crosstalk plan vms.yaml --json | jq '.vms[].xml' -r
  crosstalk plan --from-status --policy per-llc`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if fromStatus == (len(args) == 1) {
				return errors.New("give a spec file or --from-status (one of them)")
			}
			if policy != "" && !fromStatus {
				return errors.New("--policy is for --from-status; a spec gives each VM its policy")
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
			if fromStatus {
				pol := plan.Policy(policy)
				if pol == "" {
					pol = plan.OneToOne
				}
				doms, errs, err := plan.LoadDomains(cmd.Context(), plan.StatusDir{Host: h})
				if err != nil {
					return exitError{code: 1, err: err}
				}
				for _, e := range errs {
					loadErrs = append(loadErrs, e.Error())
					fmt.Fprintf(g.errOut, "crosstalk plan: skipping a domain: %v\n", e)
				}
				if len(doms) == 0 {
					return exitError{code: 1, err: fmt.Errorf("no running domains in %s under %s", plan.StatusDirPath, h.Root())}
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

			if asJSON {
				out := planJSON{Host: hostJSON(hc), Plan: p, Warnings: append(hc.Warnings, loadErrs...)}
				for i, d := range current {
					out.Current = append(out.Current, domainChecksJSON{Name: d.Name, Source: d.Source, Checks: currentChecks[i]})
				}
				enc := json.NewEncoder(g.out)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			if current != nil {
				fmt.Fprintf(g.out, "crosstalk plan --from-status — %s\n\nTOPOLOGY CHECKS OF THE RUNNING DOMAINS\n", plan.HostLine(hc))
				if err := plan.WriteDomainChecks(g.out, current, currentChecks); err != nil {
					return err
				}
				fmt.Fprintf(g.out, "\nPLAN FOR THEM (policy %s)\n\n", spec.VMs[0].Policy)
			}
			return plan.WriteText(g.out, hc, p)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the plan as JSON")
	cmd.Flags().StringVar(&reserve, "reserve", "", "CPUs kept for the host and emulator threads, e.g. `0,1` or 0,64 (never given to vCPUs)")
	cmd.Flags().BoolVar(&fromStatus, "from-status", false, "plan the running domains, read from libvirt's status files under --root")
	cmd.Flags().StringVar(&policy, "policy", "", "policy for --from-status: 1to1 (default), per-llc, per-node or shared")
	return cmd
}

type planJSON struct {
	Host     hostSummary        `json:"host"`
	Current  []domainChecksJSON `json:"current,omitempty"`
	Plan     *plan.Plan         `json:"plan"`
	Warnings []string           `json:"warnings,omitempty"`
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

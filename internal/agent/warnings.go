package agent

import "log/slog"

// tenantWarnings gives each warning about a tenant once, then at debug
// level: a tenant's trouble (no lever, no class of service left) recurs
// every interval and would flood the log.
type tenantWarnings struct {
	log    *slog.Logger
	warned map[string]map[string]bool // by tenant, then kind of trouble
}

func newTenantWarnings(log *slog.Logger) *tenantWarnings {
	return &tenantWarnings{log: log, warned: map[string]map[string]bool{}}
}

// once warns about a tenant's kind of trouble (key) the first time, at
// debug level after. tenant may be "" for the host's own trouble.
func (w *tenantWarnings) once(tenant, key, what string, err error) {
	if w.warned[tenant][key] {
		w.log.Debug(what, "err", err)
		return
	}
	if w.warned[tenant] == nil {
		w.warned[tenant] = map[string]bool{}
	}
	w.warned[tenant][key] = true
	w.log.Warn(what+" (further errors at debug level)", "err", err)
}

// prune forgets the warnings about tenants no longer present, so a tenant
// that comes back under the same ID is warned about again.
func (w *tenantWarnings) prune(present func(id string) bool) {
	for id := range w.warned {
		if id != "" && !present(id) {
			delete(w.warned, id)
		}
	}
}

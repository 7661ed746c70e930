package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
)

// DefaultAddr is where the agent serves its API unless configured: localhost
// only, since the state names every tenant on the host.
const DefaultAddr = "127.0.0.1:9477"

// staleIntervals is how many intervals may pass without a new State before
// /healthz says the agent is stuck.
const staleIntervals = 3

const index = `crosstalk agent

GET /metrics     Prometheus metrics (tenants, canary probes, contention, actions, proofs)
GET /api/state   the latest state as JSON (503 before the first interval)
GET /healthz     "ok" while the state is fresh (updated within 3 intervals), else 503
`

// Handler serves /metrics (Prometheus exposition), /api/state (the latest
// State as JSON, 503 with a JSON error before the first interval), /healthz
// (200 "ok" when the last update is younger than 3 intervals, else 503 with
// the age) and / (a tiny text index of the endpoints). Only GET (and HEAD)
// are allowed; anything else gets 405.
func Handler(src StateSource, reg *prometheus.Registry) http.Handler {
	return newHandler(src, reg, time.Now)
}

func newHandler(src StateSource, reg *prometheus.Registry, now func() time.Time) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// A broken series must not hide all the others.
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	mux.HandleFunc("/api/state", func(w http.ResponseWriter, r *http.Request) {
		s, ok := src.Latest()
		if !ok {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{
				"error": "no state yet: the agent has not finished its first interval",
			})
			return
		}
		writeJSON(w, http.StatusOK, s)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		s, ok := src.Latest()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "no state yet: the agent has not finished its first interval")
			return
		}
		interval := time.Duration(s.Interval * float64(time.Second))
		if interval <= 0 {
			interval = time.Second
		}
		age := now().Sub(s.Time)
		if age < staleIntervals*interval {
			fmt.Fprintln(w, "ok")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "stale: last update %s ago (interval %s, limit %s)\n",
			age.Round(time.Millisecond), interval, staleIntervals*interval)
	})
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, index)
	})
	return onlyGET(mux)
}

// onlyGET answers 405 to anything but GET and HEAD, on every path.
func onlyGET(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusMethodNotAllowed)
			fmt.Fprintf(w, "method %s not allowed: the crosstalk API is read-only (GET)\n", r.Method)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// A State with NaN or Inf in it: say so rather than send half a body.
		code = http.StatusInternalServerError
		b, _ = json.Marshal(map[string]string{"error": "encoding state: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

// Serve listens on addr (default 127.0.0.1:9477 — localhost unless
// configured) and serves h until ctx ends, then shuts down gracefully (5 s at
// most). webConfigFile, unless "", is an exporter-toolkit web configuration:
// TLS and basic auth as every Prometheus exporter takes them. It returns nil
// after a shutdown caused by ctx, and the error otherwise (e.g. the address
// is in use).
func Serve(ctx context.Context, addr, webConfigFile string, h http.Handler, log *slog.Logger) error {
	if addr == "" {
		addr = DefaultAddr
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	return serveListener(ctx, ln, webConfigFile, h, log)
}

func serveListener(ctx context.Context, ln net.Listener, webConfigFile string, h http.Handler, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("api listening", "addr", ln.Addr().String(), "endpoints", "/metrics /api/state /healthz")

	errc := make(chan error, 1)
	systemdSocket := false
	flags := &web.FlagConfig{WebListenAddresses: &[]string{ln.Addr().String()}, WebSystemdSocket: &systemdSocket, WebConfigFile: &webConfigFile}
	go func() { errc <- web.Serve(ln, srv, flags, log) }()
	select {
	case err := <-errc:
		return fmt.Errorf("api: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shutCtx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("api: shutdown: %w", err)
	}
	log.Info("api stopped", "addr", ln.Addr().String())
	return nil
}

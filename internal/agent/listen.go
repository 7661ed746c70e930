package agent

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// checkListen validates the listen address before anything starts: "off",
// or HOST:PORT with a port 0-65535 and a host that is empty (every
// interface), an IP address or a host name.
func checkListen(listen string) error {
	if listen == "off" {
		return nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("%q: want HOST:PORT or \"off\" (%v)", listen, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %q outside 0-65535", listen, port)
	}
	if host != "" && net.ParseIP(host) == nil && !validHostName(host) {
		return fmt.Errorf("%q: host %q is neither an IP address nor a host name", listen, host)
	}
	return nil
}

func validHostName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// ExposedListen reports whether listen binds beyond the loopback interface
// (every interface, or any address or name other than a loopback one), and
// the host part to name in a warning.
func ExposedListen(listen string) (string, bool) {
	if listen == "off" {
		return "", false
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return listen, true
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return host, false
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return host, false
	}
	if host == "" {
		host = "every interface"
	}
	return host, true
}

// CheckHost guards h against DNS rebinding: a web page whose name an
// attacker re-points at 127.0.0.1 reaches the agent with its own name in
// the Host header. Allowed are "localhost", the host of the listen address
// and any IP address literal (rebinding needs a name, so an address cannot
// be one; Prometheus scraping a pod or node by its IP keeps working).
// Anything else gets 403.
func CheckHost(listen string, h http.Handler) http.Handler {
	configured, _, _ := net.SplitHostPort(listen)
	configured = strings.TrimSuffix(configured, ".")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowedHost(r.Host, configured) {
			http.Error(w, "forbidden: Host header names neither localhost, an IP address nor the listen address", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func allowedHost(hostHeader, configured string) bool {
	host := hostHeader
	if h, _, err := net.SplitHostPort(hostHeader); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), ".")
	switch {
	case host == "":
		return false
	case strings.EqualFold(host, "localhost"):
		return true
	case net.ParseIP(host) != nil:
		return true
	case configured != "" && net.ParseIP(configured) == nil && strings.EqualFold(host, configured):
		return true
	}
	return false
}

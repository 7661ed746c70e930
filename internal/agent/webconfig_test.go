package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// selfSigned writes a certificate for 127.0.0.1 and its key into dir and
// returns their paths and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "crosstalk test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// With a web configuration the listener speaks TLS only and asks for the
// configured user: no credentials or a wrong password get 401, the right
// ones the metrics.
func TestServeWebConfigTLSAndBasicAuth(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(dir, "web.yml")
	doc := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  prometheus: %s\n", certFile, keyFile, hash)
	if err := os.WriteFile(webConfig, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	cfg.WebConfigFile = webConfig
	if err := cfg.Validate(); err != nil {
		t.Fatalf("a valid web configuration rejected: %v", err)
	}

	src := &fakeSource{}
	src.set(sampleState())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveListener(ctx, ln, webConfig, Handler(src, NewRegistry(src, "", "")), nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve after cancel: %v", err)
		}
	}()

	url := "https://" + ln.Addr().String() + "/metrics"
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(user, password string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET as %q: %v", user, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, c := range []struct {
		user, password string
		code           int
	}{
		{"", "", http.StatusUnauthorized},
		{"prometheus", "wrong", http.StatusUnauthorized},
		{"someone", "s3cret", http.StatusUnauthorized},
		{"prometheus", "s3cret", http.StatusOK},
	} {
		code, body := get(c.user, c.password)
		if code != c.code {
			t.Errorf("GET /metrics as %q/%q: %d, want %d", c.user, c.password, code, c.code)
		}
		if code == http.StatusOK && !strings.Contains(body, "crosstalk_tenant_cpu_seconds_total") {
			t.Errorf("authenticated scrape lacks the tenant metrics:\n%.300s", body)
		}
	}
	// Plain HTTP is not served.
	res, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + ln.Addr().String() + "/metrics")
	if err == nil {
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Error("plain HTTP scrape answered 200 with TLS configured")
		}
	}
}

// A web configuration that names a missing certificate fails validation,
// naming the key, before anything starts.
func TestConfigRejectsBadWebConfig(t *testing.T) {
	dir := t.TempDir()
	webConfig := filepath.Join(dir, "web.yml")
	os.WriteFile(webConfig, []byte("tls_server_config:\n  cert_file: "+filepath.Join(dir, "missing.crt")+"\n  key_file: "+filepath.Join(dir, "missing.key")+"\n"), 0o600)
	for _, file := range []string{webConfig, filepath.Join(dir, "absent.yml")} {
		cfg := Defaults()
		cfg.WebConfigFile = file
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "web_config_file") {
			t.Errorf("web config %s: %v, want a web_config_file error", file, err)
		}
	}
}

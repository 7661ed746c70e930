package nodesignal

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Patch types the API server accepts on nodes.
const (
	MergePatch          = "application/merge-patch+json"
	StrategicMergePatch = "application/strategic-merge-patch+json"
)

// Default in-cluster credentials, mounted into every pod with a service account.
const (
	DefaultTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	DefaultCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// NodeAPI is the part of the Kubernetes API the publisher uses: read a node,
// patch its object (labels, taints), patch its status (conditions).
type NodeAPI interface {
	GetNode(ctx context.Context, name string) (Node, error)
	PatchNode(ctx context.Context, name, patchType string, body []byte) error
	PatchNodeStatus(ctx context.Context, name, patchType string, body []byte) error
}

// Node is the part of a core/v1 Node the publisher reads.
type Node struct {
	Metadata struct {
		Name            string            `json:"name"`
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Taints []Taint `json:"taints"`
	} `json:"spec"`
}

// Taint is a core/v1 Taint.
type Taint struct {
	Key       string `json:"key"`
	Value     string `json:"value,omitempty"`
	Effect    string `json:"effect"`
	TimeAdded string `json:"timeAdded,omitempty"`
}

// APIError is a non-2xx answer of the API server.
type APIError struct {
	Code    int
	Method  string
	Path    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("kubernetes API: %s %s: %d %s", e.Method, e.Path, e.Code, e.Message)
}

// IsConflict says the object changed since it was read (409).
func IsConflict(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == http.StatusConflict
}

// Client is a minimal Kubernetes API client for nodes, authenticated with a
// bearer token re-read from its file on every request (projected service
// account tokens rotate) and a pinned CA.
type Client struct {
	// Server is the API server's base URL, e.g. https://10.96.0.1:443.
	Server    string
	TokenFile string
	HTTP      *http.Client
	UserAgent string
}

// InClusterServer is the API server address every pod is told through its
// environment (KUBERNETES_SERVICE_HOST/PORT), or "" outside a cluster.
func InClusterServer() string {
	h, p := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if h == "" || p == "" {
		return ""
	}
	return "https://" + net.JoinHostPort(h, p)
}

// NewClient builds a client for server (InClusterServer() when empty) with
// the token and CA files (the service account's when empty).
func NewClient(server, tokenFile, caFile, userAgent string) (*Client, error) {
	if server == "" {
		server = InClusterServer()
	}
	if server == "" {
		return nil, errors.New("kubernetes: no API server: not in a pod (KUBERNETES_SERVICE_HOST unset) and kubernetes.api_server not configured")
	}
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("kubernetes: api_server %q: want https://HOST[:PORT]", server)
	}
	if tokenFile == "" {
		tokenFile = DefaultTokenFile
	}
	if caFile == "" {
		caFile = DefaultCAFile
	}
	if _, err := os.Stat(tokenFile); err != nil {
		return nil, fmt.Errorf("kubernetes: service account token: %w", err)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("kubernetes: CA %s: no PEM certificate", caFile)
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		MaxIdleConns:        2,
	}
	return &Client{Server: strings.TrimRight(server, "/"), TokenFile: tokenFile, UserAgent: userAgent,
		HTTP: &http.Client{Transport: tr, Timeout: 15 * time.Second}}, nil
}

func nodePath(name string) string { return "/api/v1/nodes/" + url.PathEscape(name) }

// GetNode reads a node.
func (c *Client) GetNode(ctx context.Context, name string) (Node, error) {
	var n Node
	b, err := c.do(ctx, http.MethodGet, nodePath(name), "", nil)
	if err != nil {
		return n, err
	}
	if err := json.Unmarshal(b, &n); err != nil {
		return n, fmt.Errorf("kubernetes API: node %s: %w", name, err)
	}
	return n, nil
}

// PatchNode patches a node's object (metadata, spec).
func (c *Client) PatchNode(ctx context.Context, name, patchType string, body []byte) error {
	_, err := c.do(ctx, http.MethodPatch, nodePath(name), patchType, body)
	return err
}

// PatchNodeStatus patches a node's status subresource (conditions).
func (c *Client) PatchNodeStatus(ctx context.Context, name, patchType string, body []byte) error {
	_, err := c.do(ctx, http.MethodPatch, nodePath(name)+"/status", patchType, body)
	return err
}

func (c *Client) do(ctx context.Context, method, path, contentType string, body []byte) ([]byte, error) {
	token, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: service account token: %w", err)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Server+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kubernetes API: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("kubernetes API: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(b))
		var st struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &st) == nil && st.Message != "" {
			msg = st.Message
		}
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		return nil, &APIError{Code: resp.StatusCode, Method: method, Path: path, Message: msg}
	}
	return b, nil
}

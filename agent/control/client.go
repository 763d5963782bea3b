package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"

	"github.com/gridlink/gridlink/peercred"
	"github.com/gridlink/gridlink/status"
)

// Client talks to a running agent's control API.
type Client struct {
	hc *http.Client
	// controls are the sockets tried in order; byDefault: they were not
	// given, so the agent behind one must run as the caller or root.
	controls  []string
	byDefault bool
}

// Dial returns a client for the agent at control; "" tries the caller's
// own agent (UserControl, for users other than root), then the system
// agent (DefaultControl).
func Dial(control string) *Client {
	c := &Client{controls: []string{control}}
	if control == "" {
		c.controls, c.byDefault = defaultControls(), true
	}
	c.hc = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return c.dial(ctx) },
	}}
	return c
}

// dial connects to the first control socket that answers.
func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	for _, control := range c.controls {
		conn, err := d.DialContext(ctx, "unix", control)
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		if err != nil {
			return nil, &DialError{Control: control, Err: err}
		}
		if c.byDefault {
			if uid, _, err := peercred.Unix(conn); err == nil && uid != 0 && uid != os.Geteuid() {
				conn.Close()
				return nil, &ForeignAgentError{Control: control, UID: uid}
			}
		}
		return conn, nil
	}
	return nil, ErrNoAgent
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var fe *ForeignAgentError
		var de *DialError
		switch {
		case errors.Is(err, ErrNoAgent):
			return ErrNoAgent
		case errors.As(err, &fe):
			return fe
		case errors.As(err, &de):
			return de
		}
		return fmt.Errorf("agent: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ResponseError(resp)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Status asks the agent for its status.
func (c *Client) Status(ctx context.Context) (*status.Agent, error) {
	var st status.Agent
	return &st, c.do(ctx, "GET", "/status", nil, &st)
}

// Doctor asks the agent to diagnose this host and, if addr is given, the
// way to a target.
func (c *Client) Doctor(ctx context.Context, addr string) (*status.Diagnosis, error) {
	var d status.Diagnosis
	return &d, c.do(ctx, "POST", "/doctor", DoctorRequest{Addr: addr}, &d)
}

// Ping asks the agent to ping a virtual address.
func (c *Client) Ping(ctx context.Context, req PingRequest) (*status.Ping, error) {
	var res status.Ping
	return &res, c.do(ctx, "POST", "/ping", req, &res)
}

// Perf asks the agent to measure throughput to a node's sink.
func (c *Client) Perf(ctx context.Context, req PerfRequest) (*status.Perf, error) {
	var res status.Perf
	return &res, c.do(ctx, "POST", "/perf", req, &res)
}

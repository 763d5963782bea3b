package agent

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gridlink/gridlink/agent/control"
	"github.com/gridlink/gridlink/internal/testwait"
	"github.com/gridlink/gridlink/tun"
)

// fakeVIPHost is a VIPHost that counts what it was asked.
type fakeVIPHost struct {
	mu   sync.Mutex
	runs int
}

func (h *fakeVIPHost) Setup(ctx context.Context, names bool) (control.VIPSetup, error) {
	return control.VIPSetup{Addrs: []string{"100.96.0.5/12", "fd67:726c::5/32"}, MTU: 1500}, nil
}

func (h *fakeVIPHost) Run(dev tun.Device, names *NameSockets) (func() error, error) {
	h.mu.Lock()
	h.runs++
	h.mu.Unlock()
	return dev.Close, nil
}

// The agent takes one device at a time: a second request while one is
// granted is refused (KindBusy) naming the holder, on both ends; a handed
// descriptor that is no TUN device is refused (KindBadRequest) and never
// run on, which frees the slot again; an agent without a VIPHost refuses.
func TestVIPDeviceOneAtATime(t *testing.T) {
	hubAddr := startHub(t)
	a, sock, log := startLoggedAgent(t, "vipdev", hubAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := control.Dial(sock)

	_, err := c.VIPDevice(ctx, control.VIPRequest{})
	if se, ok := errors.AsType[*control.StreamError](err); !ok || se.Kind != control.KindNotAllowed || !strings.Contains(se.Msg, ErrNoVIPHost.Error()) {
		t.Fatalf("without a VIPHost: %v, want refused %q", err, ErrNoVIPHost)
	}

	host := &fakeVIPHost{}
	a.SetVIPHost(host)
	first, err := c.VIPDevice(ctx, control.VIPRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if len(first.Setup.Addrs) != 2 || first.Setup.MTU != 1500 {
		t.Errorf("setup %+v", first.Setup)
	}
	_, err = c.VIPDevice(ctx, control.VIPRequest{})
	busy := (&BusyError{Holder: os.Getpid()}).Error()
	if se, ok := errors.AsType[*control.StreamError](err); !ok || se.Kind != control.KindBusy || se.Msg != busy {
		t.Errorf("a second device: %v, want refused %q", err, busy)
	}
	if !strings.Contains(log.String(), busy) {
		t.Errorf("the agent's log lacks %q:\n%s", busy, log)
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = first.Hand(os.Getpid(), r)
	r.Close()
	se, ok := errors.AsType[*control.StreamError](err)
	if !ok || se.Kind != control.KindBadRequest || !strings.Contains(se.Msg, "not a TUN device") {
		t.Errorf("a pipe as the device: %v, want refused as not a TUN device", err)
	}
	if ok && !strings.Contains(log.String(), strings.TrimPrefix(se.Msg, "agent: ")) {
		t.Errorf("the agent's log lacks %q:\n%s", se.Msg, log)
	}
	if host.runs != 0 {
		t.Errorf("the network ran on a refused device")
	}
	testwait.Until(t, "the slot to be free again", 10*time.Second, func() bool {
		d, err := c.VIPDevice(ctx, control.VIPRequest{})
		if err != nil {
			if _, ok := errors.AsType[*control.StreamError](err); !ok {
				t.Fatal(err)
			}
			return false
		}
		d.Close()
		return true
	})
}

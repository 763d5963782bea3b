package gridlink_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gridlink/gridlink"
	"github.com/gridlink/gridlink/hub/hubserver"
	"github.com/gridlink/gridlink/identity"
	"github.com/gridlink/gridlink/link"
	"github.com/gridlink/gridlink/pki"
)

// startHub runs a hub on loopback, for the examples.
func startHub() (addr string, stop func()) {
	key, _ := identity.NewKey()
	creds, _ := pki.NewCredentials(key)
	h, err := hubserver.New(hubserver.Config{Name: "site", Creds: creds, Listen: "127.0.0.1:0"})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go h.Serve(ctx)
	return h.Addr().String(), cancel
}

// startNode starts a node attached to the hub and waits until the hub
// knows it.
func startNode(name, hubAddr string) *gridlink.Node {
	n, err := gridlink.Start(context.Background(), gridlink.Config{Name: name, Hubs: []string{hubAddr}, ListenAddr: "127.0.0.1"})
	if err != nil {
		log.Fatal(err)
	}
	return n
}

// An HTTP server on one node, a client on another: the client's transport
// dials through gridlink, so "http://server:8080/" names the node "server".
func Example_http() {
	hubAddr, stop := startHub()
	defer stop()
	server, client := startNode("server", hubAddr), startNode("client", hubAddr)
	defer server.Close()
	defer client.Close()

	ln, err := server.Listen("8080")
	if err != nil {
		log.Fatal(err)
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", server.Name())
	}))

	hc := &http.Client{Transport: &http.Transport{DialContext: client.DialContext}, Timeout: 10 * time.Second}
	resp, err := hc.Get("http://server:8080/")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(string(body))
	// Output: hello from server
}

// A gRPC service on one node, a client on another. The gridlink connection
// is already mutually authenticated and encrypted end to end, so gRPC runs
// without its own TLS.
func Example_grpc() {
	hubAddr, stop := startHub()
	defer stop()
	server, client := startNode("grpc-server", hubAddr), startNode("grpc-client", hubAddr)
	defer server.Close()
	defer client.Close()

	ln, err := server.Listen("50051")
	if err != nil {
		log.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(ln)
	defer gs.Stop()

	conn, err := grpc.NewClient("passthrough:///grpc-server:50051",
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return client.Dial(ctx, addr) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Status)
	// Output: SERVING
}

// A bulk transfer over four parallel streams with adaptive compression:
// the options are the dialler's, the listener only says what it allows.
func Example_parallelStreams() {
	hubAddr, stop := startHub()
	defer stop()
	server, client := startNode("bulk-server", hubAddr), startNode("bulk-client", hubAddr)
	defer server.Close()
	defer client.Close()

	ln, err := server.ListenWith("9000", gridlink.ListenOptions{MaxStreams: 8})
	if err != nil {
		log.Fatal(err)
	}
	got := make(chan int64)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}()

	c, err := client.DialWith(context.Background(), "bulk-server:9000",
		gridlink.LinkOptions{Streams: 4, Compression: link.CompressAuto})
	if err != nil {
		log.Fatal(err)
	}
	data := make([]byte, 64<<20)
	if _, err := c.Write(data); err != nil {
		log.Fatal(err)
	}
	c.Close() // sends what is queued, then the end
	fmt.Println(<-got, "bytes over", c.(*link.Conn).Stats().Streams, "streams")
	// Output: 67108864 bytes over 4 streams
}

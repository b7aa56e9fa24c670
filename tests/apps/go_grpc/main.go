// A gRPC service as grpc-go serves it, for kiln's gRPC tests and benchmark: grpc-go's own
// interop service (grpc.testing.TestService, whose generated code ships in the grpc module,
// so nothing here needs protoc), with the server reflection service registered, and latency,
// failures and streams known by construction.
//
//	UnaryCall            answers a payload of response_size bytes; with -stall-every and
//	                     -stall, a call that arrives in the first -stall of each period waits
//	                     for the period's stall to end (the wall clock's, as kiln-target's HTTP
//	                     stall); response_status {code, message} ends the call with that status
//	StreamingOutputCall  one message per response_parameters entry, each after interval_us
//	StreamingInputCall   reads the whole client stream, answers the bytes it carried
//	FullDuplexCall       answers each message as it comes, as StreamingOutputCall would
//	EmptyCall            answers at once
//
// Prints "listening on PORT" once serving; on SIGTERM prints, as one JSON line, the calls it
// answered by method and status ("UnaryCall OK") and the messages it received and sent by
// method ("StreamingOutputCall sent"), then exits.
//
//	go_grpc -port 0 [-stall-every 1s -stall 100ms] [-procs N]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

type server struct {
	testpb.UnimplementedTestServiceServer
	started    time.Time
	stallEvery time.Duration
	stall      time.Duration
	mu         sync.Mutex
	counts     map[string]int
}

func (s *server) count(key string, n int) {
	s.mu.Lock()
	s.counts[key] += n
	s.mu.Unlock()
}

// stallWait holds a call that arrives inside a period's stall until the stall ends.
func (s *server) stallWait() {
	if s.stallEvery <= 0 || s.stall <= 0 {
		return
	}
	into := time.Since(s.started) % s.stallEvery
	if into < s.stall {
		time.Sleep(s.stall - into)
	}
}

// answered counts a call's end by its status and returns that status's error.
func (s *server) answered(method string, st *testpb.EchoStatus) error {
	if st != nil && st.Code != 0 {
		code := codes.Code(st.Code)
		s.count(method+" "+code.String(), 1)
		return status.Error(code, st.Message)
	}
	s.count(method+" OK", 1)
	return nil
}

func payload(size int32) *testpb.Payload {
	return &testpb.Payload{Body: make([]byte, size)}
}

func (s *server) EmptyCall(context.Context, *testpb.Empty) (*testpb.Empty, error) {
	s.count("EmptyCall OK", 1)
	return &testpb.Empty{}, nil
}

func (s *server) UnaryCall(_ context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.stallWait()
	if err := s.answered("UnaryCall", in.GetResponseStatus()); err != nil {
		return nil, err
	}
	return &testpb.SimpleResponse{Payload: payload(in.GetResponseSize())}, nil
}

// respond sends one message per response parameter, each after its interval.
func (s *server) respond(method string, in *testpb.StreamingOutputCallRequest,
	send func(*testpb.StreamingOutputCallResponse) error) error {
	for _, p := range in.GetResponseParameters() {
		if p.GetIntervalUs() > 0 {
			time.Sleep(time.Duration(p.GetIntervalUs()) * time.Microsecond)
		}
		if err := send(&testpb.StreamingOutputCallResponse{Payload: payload(p.GetSize())}); err != nil {
			return err
		}
		s.count(method+" sent", 1)
	}
	return nil
}

// receiveAllOf reads a client stream to its end, counting and handing on each message.
func receiveAllOf[T any](s *server, method string, recv func() (*T, error), each func(*T) error) error {
	for {
		in, err := recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		s.count(method+" received", 1)
		if err := each(in); err != nil {
			return err
		}
	}
}

func (s *server) StreamingOutputCall(in *testpb.StreamingOutputCallRequest,
	stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	s.count("StreamingOutputCall received", 1)
	if err := s.respond("StreamingOutputCall", in, stream.Send); err != nil {
		return err
	}
	return s.answered("StreamingOutputCall", in.GetResponseStatus())
}

func (s *server) StreamingInputCall(
	stream grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	total := 0
	err := receiveAllOf(s, "StreamingInputCall", stream.Recv, func(in *testpb.StreamingInputCallRequest) error {
		total += len(in.GetPayload().GetBody())
		return nil
	})
	if err != nil {
		return err
	}
	s.count("StreamingInputCall OK", 1)
	return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(total)})
}

func (s *server) FullDuplexCall(
	stream grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	var last *testpb.EchoStatus
	err := receiveAllOf(s, "FullDuplexCall", stream.Recv, func(in *testpb.StreamingOutputCallRequest) error {
		last = in.GetResponseStatus()
		return s.respond("FullDuplexCall", in, stream.Send)
	})
	if err != nil {
		return err
	}
	return s.answered("FullDuplexCall", last)
}

func main() {
	port := flag.Int("port", 0, "port on 127.0.0.1 (0: any free one)")
	stallEvery := flag.Duration("stall-every", 0, "a stall's period")
	stall := flag.Duration("stall", 0, "how long each period's stall lasts")
	procs := flag.Int("procs", 0, "GOMAXPROCS (0: Go's default)")
	flag.Parse()
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s := &server{started: time.Now(), stallEvery: *stallEvery, stall: *stall, counts: map[string]int{}}
	g := grpc.NewServer()
	testpb.RegisterTestServiceServer(g, s)
	reflection.Register(g)
	go func() { _ = g.Serve(lis) }()
	fmt.Printf("listening on %d\n", lis.Addr().(*net.TCPAddr).Port)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	g.GracefulStop()
	s.mu.Lock()
	out, _ := json.Marshal(s.counts)
	s.mu.Unlock()
	fmt.Println(string(out))
}

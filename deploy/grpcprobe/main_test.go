package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestRun(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("down.v1.Down", healthpb.HealthCheckResponse_NOT_SERVING)

	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.Error(w, "not serving", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(web.Close)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedAddr := closed.Addr().String()
	require.NoError(t, closed.Close())

	addr := lis.Addr().String()
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"serving", []string{"-addr", addr}, exitOK},
		{"not serving", []string{"-addr", addr, "-service", "down.v1.Down"}, exitUnhealthy},
		{"unknown service", []string{"-addr", addr, "-service", "nope.v1.Nope"}, exitUnhealthy},
		{"unreachable", []string{"-addr", closedAddr, "-timeout", "500ms"}, exitUnhealthy},
		{"http ok", []string{"-http", web.URL + "/healthz"}, exitOK},
		{"http 503", []string{"-http", web.URL + "/other"}, exitUnhealthy},
		{"neither", nil, exitUsage},
		{"both", []string{"-addr", addr, "-http", web.URL}, exitUsage},
		{"bad flag", []string{"-nope"}, exitUsage},
		{"help", []string{"-h"}, exitOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, run(tc.args, io.Discard))
		})
	}
}

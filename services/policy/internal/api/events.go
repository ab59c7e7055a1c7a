package api

import (
	"context"

	policyv1 "github.com/millwright/millwright/pkg/gen/millwright/policy/v1"
	"github.com/millwright/millwright/pkg/stream"
)

type eventServer struct {
	policyv1.UnimplementedEventServiceServer
	h *handlers
}

func (s *eventServer) Watch(req *policyv1.WatchRequest, srv policyv1.EventService_WatchServer) error {
	return stream.ServeWatch(s.h.Stream, req, srv, func(ctx context.Context) error {
		_, err := s.h.authorize(ctx, "")
		return err
	})
}

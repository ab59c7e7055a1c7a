package apidesc

import (
	_ "embed"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

//go:embed millwright.binpb
var image []byte

var (
	once  sync.Once
	files *protoregistry.Files
	err   error
)

// Files returns the documented descriptors of every file under proto/ (millwright's and
// what they import).
func Files() (*protoregistry.Files, error) {
	once.Do(func() {
		var set descriptorpb.FileDescriptorSet
		if err = proto.Unmarshal(image, &set); err != nil {
			err = fmt.Errorf("apidesc: %w", err)
			return
		}
		files, err = protodesc.NewFiles(&set)
		if err != nil {
			err = fmt.Errorf("apidesc: %w", err)
		}
	})
	return files, err
}

// Resolver looks a file or symbol up in the documented descriptors first and in the global
// registry after (grpc.health.v1, reflection itself, well-known types not imported by ours).
func Resolver() (protodesc.Resolver, error) {
	f, err := Files()
	if err != nil {
		return nil, err
	}
	return chain{f, protoregistry.GlobalFiles}, nil
}

type chain []protodesc.Resolver

func (c chain) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	for _, r := range c {
		if fd, err := r.FindFileByPath(path); err == nil {
			return fd, nil
		}
	}
	return nil, protoregistry.NotFound
}

func (c chain) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	for _, r := range c {
		if d, err := r.FindDescriptorByName(name); err == nil {
			return d, nil
		}
	}
	return nil, protoregistry.NotFound
}

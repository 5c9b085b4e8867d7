package xdscheck

import (
	"math"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// visit calls f on every populated scalar field of m and of the messages
// in it, Anys unpacked where their type is linked into the program, with
// the field's path ("outlier_detection.failure_percentage_minimum_hosts.value").
func visit(m proto.Message, f func(path string, fd protoreflect.FieldDescriptor, v protoreflect.Value)) {
	visitMsg(m.ProtoReflect(), "", f)
}

func visitMsg(m protoreflect.Message, prefix string, f func(string, protoreflect.FieldDescriptor, protoreflect.Value)) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		if inner, err := a.UnmarshalNew(); err == nil {
			visitMsg(inner.ProtoReflect(), prefix+"("+string(inner.ProtoReflect().Descriptor().FullName())+")", f)
		}
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		path := join(prefix, string(fd.Name()))
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				visitValue(path+"["+strconv.Itoa(i)+"]", fd, l.Get(i), f)
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				visitValue(path+"["+k.String()+"]", fd.MapValue(), mv, f)
				return true
			})
		default:
			visitValue(path, fd, v, f)
		}
		return true
	})
}

func visitValue(path string, fd protoreflect.FieldDescriptor, v protoreflect.Value, f func(string, protoreflect.FieldDescriptor, protoreflect.Value)) {
	if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
		visitMsg(v.Message(), path, f)
		return
	}
	f(path, fd, v)
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// javaIntRange returns the paths of m's unsigned fields whose value a
// Java int (uint32 fields) or long (uint64 fields) cannot hold, with the
// value.
func javaIntRange(m proto.Message) []string {
	var out []string
	visit(m, func(path string, fd protoreflect.FieldDescriptor, v protoreflect.Value) {
		switch fd.Kind() {
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			if v.Uint() > math.MaxInt32 {
				out = append(out, path+" = "+strconv.FormatUint(v.Uint(), 10)+", above 2147483647")
			}
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			if v.Uint() > math.MaxInt64 {
				out = append(out, path+" = "+strconv.FormatUint(v.Uint(), 10)+", above 9223372036854775807")
			}
		}
	})
	return out
}

package registry

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// FuzzWireCodec checks the codec's fast path against encoding/json: every
// value parseWire accepts decodes as encoding/json decodes it, and
// appendWire writes what encoding/json writes, for any value encoding/json
// can decode.
func FuzzWireCodec(f *testing.F) {
	for _, seed := range []string{
		`{"v":1,"id":"a","name":"user","addr":"10.0.0.7:9000","weight":100}`,
		`{"v":1,"id":"user-1","name":"user","version":"v1.4.2","addr":"[::1]:9000","zone":"eu-1a","weight":0,"metadata":{"a":"1","color":"blue"},"registered_at":"2026-11-30T10:00:00.123456789Z"}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","zone":"eu-1a","region":"eu-1","weight":5}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","region":"eu-1","zone":"eu-1a"}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","metadata":{}}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","metadata":{"k":"1","k":"2"}}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","metadata":{"html":"<b>&</b>","é":"ü"}}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","metadata":{"ctl":"\u0001\n","q":"\"\\"}}`,
		`{"v":1,"ID":"a","name":"user","addr":"h:1"}`,
		`{"v":1,"name":"user","id":"a","addr":"h:1"}`,
		`{"v":1,"id":"a","id":"b","name":"user","addr":"h:1"}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","extra":true}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","weight":1234567890}`,
		`{"v":01,"id":"a","name":"user","addr":"h:1","weight":-1}`,
		`{"v":1.0,"id":"a","name":"user","addr":"h:1","weight":1e2}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","weight":null,"metadata":null}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1"} `,
		`{ "v":1}`, `{"v":1,}`, `{}`, `{"v":1}x`, `[]`, `null`, "", "{",
		"{\"v\":1,\"id\":\"a\x7f\",\"name\":\"user\",\"addr\":\"h:1\"}",
		"{\"v\":1,\"id\":\"\xff\",\"name\":\"user\",\"addr\":\"h:1\"}",
		// The edges of the fast path's character classes and numbers: each
		// side of every bound, compared with encoding/json both ways.
		"{\"v\":1,\"id\":\"a\x80\",\"name\":\"user\",\"addr\":\"h:1\"}",
		"{\"v\":1,\"id\":\"a\x7e\",\"name\":\"user\",\"addr\":\"h:1\"}",
		"{\"v\":1,\"id\":\"a\x1f\",\"name\":\"user\",\"addr\":\"h:1\"}",
		`{"v":1,"id":"a b","name":"user","addr":"h:1","metadata":{"k":" ~"}}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","metadata":{"k":"\u001f\u007f"}}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","metadata":{"<":">","&":"\"","\\":"x"}}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","weight":0}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","weight":9}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","weight":10}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","weight":123456789}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","weight":00}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","weight":10.5}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","weight":1E2}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","weight":1e2}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","weight":/}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","weight"::}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","registered_at":"2026-11-30T10:00:00Z","zone":"z"}`,
		// Strings made of one character encoding/json escapes: a fast path
		// that took it as plain would write it raw.
		`{"v":1,"id":"a","name":"user","addr":"h:1","metadata":{"k":"\""}}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","metadata":{"k":"\\"}}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","metadata":{"k":"<"}}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","metadata":{"k":">"}}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","metadata":{"k":"&"}}`,
		`{"v":1,"id":"a","name":"user","addr":"h:1","metadata":{"k":"\u0000"}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast wireInstance
		if parseWire(data, &fast) {
			var slow wireInstance
			if err := json.Unmarshal(data, &slow); err != nil {
				t.Fatalf("parseWire accepted %q; encoding/json refuses it: %v", data, err)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("parseWire(%q) = %+v; encoding/json: %+v", data, fast, slow)
			}
		}
		var wi wireInstance
		if json.Unmarshal(data, &wi) != nil {
			return
		}
		want, err := json.Marshal(wi)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendWire(nil, &wi)
		if !ok {
			return
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("appendWire wrote %s; encoding/json writes %s", got, want)
		}
		var back, slow wireInstance
		if parseWire(got, &back) {
			_ = json.Unmarshal(got, &slow)
			if !reflect.DeepEqual(back, slow) {
				t.Fatalf("parseWire(%s) = %+v; encoding/json: %+v", got, back, slow)
			}
		}
	})
}

// The fast path is the one taken for ordinary values, both ways.
func TestOrdinaryValuesTakeTheFastPath(t *testing.T) {
	in := Instance{Name: "user", ID: "user-1", Addr: "10.0.0.7:9000", Version: "v1.4.2", Zone: "eu-1a", Region: "eu-1",
		Weight: 250, Metadata: map[string]string{"color": "blue", "az": "1"}, RegisteredAt: time.Date(2026, 11, 30, 10, 0, 0, 5, time.UTC)}
	v, err := Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var wi wireInstance
	if !parseWire(v, &wi) {
		t.Fatalf("parseWire refuses Marshal's value %s", v)
	}
	const want = `{"v":1,"id":"user-1","name":"user","version":"v1.4.2","addr":"10.0.0.7:9000","zone":"eu-1a","region":"eu-1","weight":250,"metadata":{"az":"1","color":"blue"},"registered_at":"2026-11-30T10:00:00.000000005Z"}`
	if string(v) != want {
		t.Fatalf("Marshal = %s\nwant      %s", v, want)
	}
	out, err := Unmarshal(v)
	if err != nil || !out.Equal(in) {
		t.Fatalf("Unmarshal = %+v, %v; want %+v", out, err, in)
	}
}

// Values the fast path does not take still decode, through encoding/json.
func TestEscapedValuesDecode(t *testing.T) {
	in := Instance{Name: "user", ID: "a", Addr: "h:1", Metadata: map[string]string{"html": "<b>&</b>", "é": "ü\n\"\\"}}
	v, err := Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Unmarshal(v)
	if err != nil || !out.Equal(in.Normalize()) {
		t.Fatalf("Unmarshal(%s) = %+v, %v; want %+v", v, out, err, in.Normalize())
	}
}

var ordinary = Instance{Name: "user", ID: "user-1", Addr: "10.0.0.7:9000", Version: "v1.4.2", Zone: "eu-1a",
	Metadata: map[string]string{"color": "blue"}, RegisteredAt: time.Date(2026, 11, 30, 10, 0, 0, 5, time.UTC)}

// BenchmarkMarshal and BenchmarkUnmarshal time the codec on an ordinary
// value (the fast path); the /json variants time encoding/json on the same
// value, as the codec did before it had a fast path.
func BenchmarkMarshal(b *testing.B) {
	b.Run("codec", func(b *testing.B) {
		for b.Loop() {
			if _, err := Marshal(ordinary); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		w := DefaultWeight
		wi := wireInstance{V: SchemaVersion, ID: ordinary.ID, Name: ordinary.Name, Version: ordinary.Version, Addr: ordinary.Addr,
			Zone: ordinary.Zone, Weight: &w, Metadata: ordinary.Metadata, RegisteredAt: ordinary.RegisteredAt.Format(time.RFC3339Nano)}
		for b.Loop() {
			if _, err := json.Marshal(wi); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkUnmarshal(b *testing.B) {
	v, err := Marshal(ordinary)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("codec", func(b *testing.B) {
		for b.Loop() {
			if _, err := Unmarshal(v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			var wi wireInstance
			if err := json.Unmarshal(v, &wi); err != nil {
				b.Fatal(err)
			}
		}
	})
}

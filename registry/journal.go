package registry

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Actions of the operator writes a Record names, as the muster commands
// that make them are named.
const (
	ActionDrain       = "drain"        // an override of weight 0
	ActionWeight      = "weight"       // an override of another weight
	ActionUndrain     = "undrain"      // an override removed
	ActionDeregister  = "deregister"   // an instance's key (and override) deleted
	ActionCanary      = "canary"       // a canary set
	ActionCanaryOff   = "canary off"   // a canary removed
	ActionPolicySet   = "policy set"   // a call policy set
	ActionPolicyClear = "policy clear" // a call policy removed
)

// Sources of an operator write.
const (
	SourceCommand = "command" // the muster command
	SourceConsole = "console" // the web console
	SourceLibrary = "library" // a program calling the backend's functions
)

// MaxJournal bounds the records a journal keeps per service (the ring's
// size), and DefaultJournal is the size used when none is chosen.
const (
	MaxJournal     = 10000
	DefaultJournal = 100
)

// Record is the trace of one operator write: who changed what setting of
// which service, from where, when, and its value before and after. The
// backend writes it in the same transaction as the change, so neither
// exists without the other (registry/etcd: SetOverride, SetCanary,
// SetPolicy and their Clear functions, Delete). Its JSON form is
// {"v":1,"seq":7,"time":"2026-12-04T02:30:00Z","who":"alice","source":"console",
// "action":"drain","service":"user","instance":"10.0.0.7:9000",
// "before":null,"after":{"v":1,"weight":0}}.
type Record struct {
	// Seq numbers the writes of one service, from 0.
	Seq uint64 `json:"seq"`
	// Time is when the write was made, in UTC.
	Time time.Time `json:"time"`
	// Who made it: a console user, an etcd user, a local OS user.
	Who string `json:"who"`
	// Source is where it was made from: SourceCommand, SourceConsole,
	// SourceLibrary, or another name a program chose.
	Source string `json:"source"`
	// Action is one of the Action… constants.
	Action  string `json:"action"`
	Service string `json:"service"`
	// Instance is the instance ID of an instance's write; "" for a
	// service setting.
	Instance string `json:"instance,omitempty"`
	// Before and After are the stored values of what changed (an
	// override, an instance, a canary, a policy), JSON null when absent.
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
	// Revision is the store's revision at which the write and the record
	// landed, set when the record is read (its key's modification
	// revision); not part of the stored value.
	Revision int64 `json:"revision,omitempty"`
}

// JournalKey returns the prefix of the journal of service,
// "<prefix>.history/<service>/" (by default
// "/muster/services.history/user/"), under which its records live in
// slots (JournalSlotKey), and JournalSeqKey its sequence. Both lie outside
// the instances' key range.
func JournalKey(prefix, service string) string {
	return JournalRoot(prefix) + service + "/"
}

// JournalRoot returns the prefix of every service's journal,
// "<prefix>.history/".
func JournalRoot(prefix string) string {
	return strings.TrimRight(prefix, "/") + ".history/"
}

// JournalSlotKey returns the key of slot (0 ≤ slot < MaxJournal) of the
// journal of service: JournalKey and the slot in five digits, so that the
// slots sort by number.
func JournalSlotKey(prefix, service string, slot int) string {
	return fmt.Sprintf("%s%05d", JournalKey(prefix, service), slot)
}

// JournalSeqKey returns the key holding the sequence number of the next
// record of service's journal: "<prefix>.history/<service>".
func JournalSeqKey(prefix, service string) string {
	return JournalRoot(prefix) + service
}

// ParseJournalSeq decodes the value of a JournalSeqKey.
func ParseJournalSeq(data []byte) (uint64, error) {
	n, err := strconv.ParseUint(string(data), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: journal sequence %q is not a whole number", ErrMalformedValue, data)
	}
	return n, nil
}

// sourceRE is what a source name may be.
var sourceRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// ValidateWho checks a record's Who: 1 to MaxSetByLen bytes of printable
// UTF-8.
func ValidateWho(who string) error {
	switch {
	case who == "" || len(who) > MaxSetByLen:
		return settingErr("record", "who", "%d bytes: want 1 to %d", len(who), MaxSetByLen)
	case !utf8.ValidString(who):
		return settingErr("record", "who", "%q is not UTF-8", who)
	}
	for _, r := range who {
		if !unicode.IsPrint(r) {
			return settingErr("record", "who", "%q has the unprintable character %q", who, r)
		}
	}
	return nil
}

// ValidateSource checks a record's Source: a lower-case letter, then up
// to 31 lower-case letters, digits or hyphens.
func ValidateSource(source string) error {
	if !sourceRE.MatchString(source) {
		return settingErr("record", "source", "%q: want a lower-case name of 1 to 32 letters, digits or hyphens", source)
	}
	return nil
}

type wireRecord struct {
	V int `json:"v"`
	Record
}

// Validate checks a record: Who, Source, the service name, the instance
// ID if any, an action, and JSON values before and after.
func (r Record) Validate() error {
	if err := ValidateWho(r.Who); err != nil {
		return err
	}
	if err := ValidateSource(r.Source); err != nil {
		return err
	}
	if err := ValidateName(r.Service); err != nil {
		return err
	}
	if r.Instance != "" {
		if err := ValidateID(r.Instance); err != nil {
			return err
		}
	}
	if r.Action == "" {
		return settingErr("record", "action", "no action")
	}
	for _, v := range []json.RawMessage{r.Before, r.After} {
		if len(v) > 0 && !json.Valid(v) {
			return settingErr("record", "before/after", "%.64q is not JSON", v)
		}
	}
	return nil
}

// MarshalRecord validates r and returns its JSON value, without Revision.
// A Before or After left empty is stored as null.
func MarshalRecord(r Record) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	r.Revision = 0
	r.Time = r.Time.UTC()
	r.Before, r.After = orNull(r.Before), orNull(r.After)
	return json.Marshal(wireRecord{V: SchemaVersion, Record: r})
}

// UnmarshalRecord decodes a record value. Errors match ErrMalformedValue
// or ErrUnsupportedVersion.
func UnmarshalRecord(data []byte) (Record, error) {
	var w wireRecord
	if err := json.Unmarshal(data, &w); err != nil {
		return Record{}, fmt.Errorf("%w: record: %v", ErrMalformedValue, err)
	}
	if w.V != SchemaVersion {
		return Record{}, fmt.Errorf("%w: record has v=%d, this code reads v=%d", ErrUnsupportedVersion, w.V, SchemaVersion)
	}
	w.Record.Revision = 0
	return w.Record, nil
}

// orNull returns v, or JSON null when v is empty.
func orNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}

// Describe says in a few words what the record's values before and after
// set, for a table: "weight 0", "blue 5%", "timeout 800ms, maxConcurrent
// 5", an instance's address, "-" for none, the raw value when it does not
// decode.
func (r Record) Describe() (before, after string) {
	return r.describe(r.Before), r.describe(r.After)
}

func (r Record) describe(v json.RawMessage) string {
	if len(v) == 0 || string(v) == "null" {
		return "-"
	}
	switch r.Action {
	case ActionDrain, ActionWeight, ActionUndrain:
		if o, err := UnmarshalOverride(v); err == nil && o.Weight != nil {
			return "weight " + strconv.Itoa(*o.Weight)
		}
	case ActionDeregister:
		if in, err := Unmarshal(v); err == nil {
			return in.Addr
		}
	case ActionCanary, ActionCanaryOff:
		if c, err := UnmarshalCanary(v); err == nil {
			return c.Color + " " + strconv.FormatFloat(c.Percent, 'f', -1, 64) + "%"
		}
	case ActionPolicySet, ActionPolicyClear:
		if p, err := UnmarshalPolicy(v); err == nil {
			return strings.Join(p.Describe(), ", ")
		}
	}
	return string(v)
}

package console

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/musterhq/muster/xds"
)

// XDSClients is what the console needs of an xDS control plane:
// *xds.Server implements it. Clients is called from the console's HTTP
// handlers, concurrently, and must not block on I/O.
type XDSClients interface {
	Clients() []xds.ClientStatus
}

var _ XDSClients = (*xds.Server)(nil)

// xdsRefresh is how often the xDS clients page's stream reads the list of
// clients again; an event is sent only when it changed.
const xdsRefresh = time.Second

// xdsView is the state of the xDS clients page.
type xdsView struct {
	Clients []xdsClient `json:"clients"`
}

// xdsClient is one ADS stream.
type xdsClient struct {
	Stream   int64     `json:"stream"`
	Delta    bool      `json:"delta"`
	Node     string    `json:"node"`
	Zone     string    `json:"zone,omitempty"`
	Since    time.Time `json:"since"`
	Services []string  `json:"services"`
	Types    []xdsType `json:"types"`
}

// xdsType is one resource type of an ADS stream.
type xdsType struct {
	// Type is the short name of the type: the type URL's last part.
	Type      string     `json:"type"`
	TypeURL   string     `json:"typeUrl"`
	Resources []string   `json:"resources"`
	Truncated bool       `json:"truncated,omitempty"`
	Sent      string     `json:"sent,omitempty"`
	Acked     string     `json:"acked,omitempty"`
	AckedAt   *time.Time `json:"ackedAt,omitempty"`
	NACK      *xdsNACK   `json:"nack,omitempty"`
}

// xdsNACK is a client's last rejection of a type.
type xdsNACK struct {
	Version string    `json:"version,omitempty"`
	Error   string    `json:"error"`
	At      time.Time `json:"at"`
}

func newXDSView(clients []xds.ClientStatus) xdsView {
	v := xdsView{Clients: make([]xdsClient, 0, len(clients))}
	for _, c := range clients {
		vc := xdsClient{Stream: c.Stream, Delta: c.Delta, Node: c.Node, Zone: c.Zone, Since: c.Since,
			Services: c.Services, Types: make([]xdsType, 0, len(c.Types))}
		for _, t := range c.Types {
			vt := xdsType{Type: t.TypeURL[strings.LastIndexByte(t.TypeURL, '.')+1:], TypeURL: t.TypeURL,
				Resources: t.Resources, Truncated: t.Truncated, Sent: t.Sent, Acked: t.Acked}
			if !t.AckedAt.IsZero() {
				vt.AckedAt = &t.AckedAt
			}
			if t.NACK != nil {
				vt.NACK = &xdsNACK{Version: t.NACK.Version, Error: t.NACK.Error, At: t.NACK.At}
			}
			vc.Types = append(vc.Types, vt)
		}
		v.Clients = append(v.Clients, vc)
	}
	return v
}

// handleXDSEvents streams the xDS clients page's state: a "state" event at
// once and whenever the list of clients changes. Without WithXDS it
// answers 404.
func (s *Server) handleXDSEvents(w http.ResponseWriter, r *http.Request) {
	if s.opts.xds == nil {
		http.Error(w, "console: no xDS control plane", http.StatusNotFound)
		return
	}
	ctx, stop := s.streamContext(r)
	defer stop()
	es, err := startStream(w)
	if err != nil {
		return
	}
	tick := time.NewTicker(xdsRefresh)
	defer tick.Stop()
	hb := time.NewTicker(heartbeat)
	defer hb.Stop()
	var sent []byte
	for {
		data, err := json.Marshal(newXDSView(s.opts.xds.Clients()))
		if err != nil {
			return
		}
		if !bytes.Equal(data, sent) {
			if es.send("state", 0, json.RawMessage(data)) != nil {
				return
			}
			sent = data
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-hb.C:
			if es.comment() != nil {
				return
			}
		}
	}
}

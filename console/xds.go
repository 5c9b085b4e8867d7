package console

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
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

// The bounds on the xDS clients page's state: the control plane's clients
// are whoever connects to it, so neither their number nor what each
// subscribes to may make a page's events grow without end.
const (
	// maxXDSClientsShown is the most clients an event lists; the count of
	// the others is sent.
	maxXDSClientsShown = 500
	// maxXDSServicesShown is the most services an event lists per
	// client; the count of the others is sent.
	maxXDSServicesShown = 20
	// maxXDSStateBytes bounds an event's data: fewer clients are listed
	// until it fits.
	maxXDSStateBytes = 1 << 20
)

// xdsView is the state of the xDS clients page.
type xdsView struct {
	Clients []xdsClient `json:"clients"`
	// More counts the clients not listed (beyond maxXDSClientsShown).
	More int `json:"more,omitempty"`
}

// xdsClient is one ADS stream.
type xdsClient struct {
	Stream int64  `json:"stream"`
	Delta  bool   `json:"delta"`
	Node   string `json:"node"`
	Zone   string `json:"zone,omitempty"`
	Region string `json:"region,omitempty"`
	// UserAgent is the client's xDS implementation and version.
	UserAgent string    `json:"userAgent,omitempty"`
	Since     time.Time `json:"since"`
	Services  []string  `json:"services"`
	// MoreServices counts the services not listed (beyond
	// maxXDSServicesShown).
	MoreServices int       `json:"moreServices,omitempty"`
	Types        []xdsType `json:"types"`
}

// xdsType is one resource type of an ADS stream.
type xdsType struct {
	// Type is the short name of the type: the type URL's last part.
	Type    string `json:"type"`
	TypeURL string `json:"typeUrl"`
	// Resources counts the names subscribed to (the page lists the
	// client's services, not each resource).
	Resources int        `json:"resources"`
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

// newXDSView is the page's state of clients, listing at most shown of them.
func newXDSView(clients []xds.ClientStatus, shown int) xdsView {
	v := xdsView{Clients: make([]xdsClient, 0, min(len(clients), shown))}
	if len(clients) > shown {
		v.More = len(clients) - shown
		clients = clients[:shown]
	}
	for _, c := range clients {
		services := c.Services
		more := 0
		if len(services) > maxXDSServicesShown {
			more, services = len(services)-maxXDSServicesShown, services[:maxXDSServicesShown]
		}
		vc := xdsClient{Stream: c.Stream, Delta: c.Delta, Node: c.Node, Zone: c.Zone, Region: c.Region, UserAgent: c.UserAgent, Since: c.Since,
			Services: services, MoreServices: more, Types: make([]xdsType, 0, len(c.Types))}
		for _, t := range c.Types {
			vt := xdsType{Type: t.TypeURL[strings.LastIndexByte(t.TypeURL, '.')+1:], TypeURL: t.TypeURL,
				Resources: len(t.Resources), Truncated: t.Truncated, Sent: t.Sent, Acked: t.Acked}
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

// xdsHub computes the xDS clients page's state at most once per
// xdsRefresh, for every page that shows it, as the fleet's state is
// computed once for every services page.
type xdsHub struct {
	mu   sync.Mutex
	at   time.Time
	data []byte
}

// state returns the page's state as JSON: the one computed less than
// xdsRefresh before now, or a new one.
func (h *xdsHub) state(cp XDSClients, now time.Time) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.data != nil && now.Sub(h.at) < xdsRefresh {
		return h.data, nil
	}
	clients := cp.Clients()
	shown := maxXDSClientsShown
	var data []byte
	for {
		v := newXDSView(clients, shown)
		var err error
		if data, err = json.Marshal(v); err != nil {
			return nil, err
		}
		if len(data) <= maxXDSStateBytes || shown <= 1 {
			break
		}
		shown /= 2
	}
	h.data, h.at = data, now
	return data, nil
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
		data, err := s.xdsState.state(s.opts.xds, time.Now())
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

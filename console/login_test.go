package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/musterhq/muster/console"
)

// loginFrom posts a login as user with password to the console at url from
// the loopback address src, on a connection of its own, and returns the
// status.
func loginFrom(t *testing.T, url string, src netip.Addr, user, password string) int {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: 5 * time.Second}
	hc := &http.Client{Timeout: waitTimeout, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
	}}
	data, _ := json.Marshal(map[string]string{"user": user, "password": password})
	req, err := http.NewRequest(http.MethodPost, url+"api/login", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Errorf("login from %v: %v", src, err)
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// Guessing one user's password from 500 addresses costs one check per
// address and then the user name's pace (a burst of 10, then one a
// second, all suspect addresses together), and never refuses the right
// password from an address that has not failed: the admin logs in at each
// of 10 tries during the attack. Without the user name's allowance the
// addresses are checked at their own pace (a burst of 10 each: 1,910
// checks); with a cap of two checks at once for all clients, the admin
// was refused 7 times in 10.
func TestLoginGuessingFromManyAddresses(t *testing.T) {
	// A cost above the minimum, so that checks take CPU and overlap (the
	// cost a deployment uses, 10 or more, would make the test slow).
	hash, err := bcrypt.GenerateFromPassword([]byte("correct horse"), 5)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, console.WithAdminUsers("alice:"+string(hash)+"\n"))
	const addresses, tries = 500, 4
	var checked, turnedAway, attempts atomic.Int64
	progress := make(chan struct{}, addresses*tries/200) // a tick each 200 attempts
	jobs := make(chan netip.Addr)
	var wg sync.WaitGroup
	start := time.Now()
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for src := range jobs {
				switch code := loginFrom(t, f.url, src, "alice", "guess"); code {
				case http.StatusForbidden:
					checked.Add(1)
				case http.StatusTooManyRequests:
					turnedAway.Add(1)
				default:
					t.Errorf("a wrong login from %v: %d", src, code)
				}
				if attempts.Add(1)%200 == 0 {
					progress <- struct{}{}
				}
			}
		}()
	}
	attack := make(chan struct{})
	go func() {
		defer close(attack)
		for range tries {
			for a := range addresses {
				jobs <- netip.AddrFrom4([4]byte{127, 1, byte(a / 250), byte(a%250 + 1)})
			}
		}
		close(jobs)
		wg.Wait()
	}()
	admin, refused := 0, 0
	for range 10 { // one each 200 attempts of the attackers
		<-progress
		switch code := loginFrom(t, f.url, netip.MustParseAddr("127.0.0.1"), "alice", "correct horse"); code {
		case http.StatusOK:
			admin++
		default:
			refused++
			t.Errorf("the admin's login during the attack: %d", code)
		}
	}
	<-attack
	took := time.Since(start)
	t.Logf("%d wrong logins from %d addresses in %v: %d checked, %d turned away; the admin logged in %d times of 10",
		addresses*tries, addresses, took.Round(time.Millisecond), checked.Load(), turnedAway.Load(), admin)
	// One check per address, then the user name's burst and one a second
	// (and one more for the second begun).
	if most := int64(addresses + 10 + int(took/time.Second) + 1); checked.Load() > most {
		t.Errorf("%d wrong logins checked in %v, want at most %d (one per address, then the user name's pace)",
			checked.Load(), took, most)
	}
}

package txboxui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// readyzBody is what txbox relay --http serves at /readyz (package
// health).
type readyzBody struct {
	Ready  bool `json:"ready"`
	Checks []struct {
		Name   string `json:"name"`
		Ready  bool   `json:"ready"`
		Error  string `json:"error"`
		Detail *struct {
			Running         bool   `json:"running"`
			DatabaseOK      bool   `json:"database_ok"`
			BrokerConnected bool   `json:"broker_connected"`
			LastGoodRound   string `json:"last_good_round"`
			Listener        string `json:"listener"`
		} `json:"detail"`
	} `json:"checks"`
}

// remoteRelayStates reads the relay's readiness endpoint: one row per
// check (per store of a relay with several), named "NAME" or "NAME: CHECK".
func remoteRelayStates(ctx context.Context, ref RelayRef) []RelayJSON {
	unknown := RelayJSON{Name: ref.Name, Remote: true, Listener: "-", Published: -1, Rejected: -1, Dead: -1, Rounds: -1, FailedRounds: -1}
	body, err := readReadyz(ctx, ref.Readyz)
	if err != nil {
		unknown.NotReady = "could not read " + ref.Readyz + ": " + err.Error()
		return []RelayJSON{unknown}
	}
	var out []RelayJSON
	for _, c := range body.Checks {
		r := unknown
		if len(body.Checks) > 1 || (c.Name != "relay" && c.Name != "") {
			r.Name = ref.Name + ": " + c.Name
		}
		r.Ready, r.NotReady = c.Ready, c.Error
		if d := c.Detail; d != nil {
			r.Running, r.DatabaseOK, r.BrokerConnected = d.Running, d.DatabaseOK, d.BrokerConnected
			r.LastGoodRound, _ = time.Parse(time.RFC3339Nano, d.LastGoodRound)
			r.Listener = map[string]string{"notify": "notify", "polling": "polling (notify lost)", "poll-only": "polling"}[d.Listener]
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		unknown.NotReady = ref.Readyz + " names no check"
		out = append(out, unknown)
	}
	return out
}

func readReadyz(ctx context.Context, url string) (*readyzBody, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	var body readyzBody
	// 503 carries the same body: not ready.
	if err := json.Unmarshal(b, &body); err != nil {
		return nil, fmt.Errorf("HTTP %d, not a readiness answer: %w", resp.StatusCode, err)
	}
	return &body, nil
}

package txboxui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/txboxui"
)

// Mount the dashboard under /ui/ of a program's own mux. A real program
// passes txboxui.InspectBacklog(inspector), the *dead.Letters of its table
// (dead.New), each inbox's Stats method and its relays; here the sources
// are functions so that the example needs no database.
func Example() {
	h, err := txboxui.New(txboxui.Config{
		Title: "orders",
		Backlog: func(context.Context) (txboxui.Backlog, error) {
			return txboxui.Backlog{Pending: 12, Retrying: 1, OldestClaimableAge: 3 * time.Second}, nil
		},
		Inboxes: []txboxui.InboxRef{{Name: "orders_inbox", Stats: func(context.Context) ([]inbox.SourceStats, error) {
			return []inbox.SourceStats{{Source: "billing", Total: 5, Processed: 5}}, nil
		}}},
		Token: "change-me", // required on every request
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", http.StripPrefix("/ui", h))
	srv := httptest.NewServer(mux) // a program: http.ListenAndServe("127.0.0.1:8080", mux)
	defer srv.Close()

	req, _ := http.NewRequest("GET", srv.URL+"/ui/api/state", nil)
	req.SetBasicAuth("operator", "change-me")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var st txboxui.State
	_ = json.NewDecoder(resp.Body).Decode(&st)
	fmt.Println(resp.StatusCode, st.Title, st.Backlog.Undelivered, st.Backlog.OldestClaimableSec)
	fmt.Println(st.Inboxes[0].Name, st.Inboxes[0].Sources[0].Source, st.Inboxes[0].Sources[0].Processed)
	// Output:
	// 200 orders 13 3
	// orders_inbox billing 5
}

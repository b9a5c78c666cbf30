package cli

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/relay/supervise"
	"github.com/txbox/txbox/txboxui"
)

// storesUI is the dashboard of `txbox relay --ui` with several stores: a
// txboxui.Stores (the list at /ui/, each store's dashboard at
// /ui/store/N/) over the group's stores, whose dashboards it makes once
// their databases are open.
type storesUI struct {
	log    *slog.Logger
	h      *relayHTTP
	sup    *supervise.Supervisor
	tables uiTables
	ui     *txboxui.Stores
	// publisher says how the relay publishes (brokerFlags.mode): one
	// broker publisher serves every store.
	publisher string

	mu     sync.Mutex
	stores []storeUI
}

type storeUI struct {
	spec storeSpec
	ui   *txboxui.Handler // nil until the store's database is open
}

// mountGroupUI serves the dashboards of the group's stores under /ui/,
// each showing the relay publishing as publisher says (brokerFlags.mode).
// They read their figures when watched only (no background sampling, which
// would cost every store's database a query every few seconds).
func (h *relayHTTP) mountGroupUI(log *slog.Logger, specs []storeSpec, sup *supervise.Supervisor, token string, tables uiTables, publisher string) error {
	s := &storesUI{log: log, h: h, sup: sup, tables: tables, publisher: publisher}
	for _, sp := range specs {
		s.stores = append(s.stores, storeUI{spec: sp})
	}
	var err error
	if s.ui, err = txboxui.NewStores(txboxui.StoresConfig{Title: "txbox relay", Stores: s.refs, Token: token, AllowedHosts: h.allowed, Logger: log}); err != nil {
		return err
	}
	h.groupUI = s
	h.ui.Store(&uiMount{s.ui})
	log.Info("serving the dashboard", "url", "http://"+h.srv.Addr+"/ui/", "stores", len(specs))
	return nil
}

// refs lists the stores for txboxui.Stores.
func (s *storesUI) refs() []txboxui.StoreRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]txboxui.StoreRef, len(s.stores))
	for i, st := range s.stores {
		spec := st.spec
		out[i] = txboxui.StoreRef{Name: spec.Name, Open: func() (*txboxui.Handler, error) {
			h, err := s.open(spec)
			if err != nil {
				return nil, redactErr(err, spec.target.url)
			}
			return h, nil
		}}
	}
	return out
}

// setSpecs sets the stores listed (after a reload of --stores), keeping
// the dashboards of the stores that did not change.
func (s *storesUI) setSpecs(specs []storeSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stores := make([]storeUI, len(specs))
	for i, sp := range specs {
		stores[i] = storeUI{spec: sp}
		for _, old := range s.stores {
			if old.spec.same(sp) {
				stores[i] = old
			}
		}
	}
	s.stores = stores
}

// open returns the store's dashboard, made now if its database has just
// opened, or why there is none yet.
func (s *storesUI) open(spec storeSpec) (*txboxui.Handler, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := -1
	for j, st := range s.stores {
		if st.spec.same(spec) {
			i = j
		}
	}
	if i < 0 {
		return nil, errors.New("no longer a store of the relay")
	}
	st := s.stores[i]
	if st.ui != nil {
		return st.ui, nil
	}
	db, err := s.sup.Database(st.spec.Name)
	if err != nil {
		return nil, err
	}
	cfg, err := db.(*storeDB).db.uiConfig(st.spec.Schema, cmp.Or(st.spec.Table, txbox.DefaultTable), s.tables)
	if err != nil {
		return nil, err
	}
	name, url, backlog := st.spec.Name, st.spec.target.url, cfg.Backlog
	cfg.Backlog = func(ctx context.Context) (txboxui.Backlog, error) {
		b, err := backlog(ctx)
		if err != nil {
			err = redactErr(err, url)
		}
		return b, err
	}
	cfg.Title, cfg.Logger = name, s.log.With("store", name)
	cfg.Relays = []txboxui.RelayRef{{Name: name, Current: func() *relay.Relay { return s.h.relayOf(name) }, Publisher: s.publisher}}
	if st.ui, err = s.ui.New(cfg); err != nil {
		return nil, err
	}
	s.stores[i] = st
	return st.ui, nil
}

// Package metrics_test moves every metric of txboxprom against the real
// services (PostgreSQL, embedded NATS with JetStream), checks the readiness
// probe of package health against a closed broker connection and a cut
// database, and measures what the metrics cost a drain.
package metrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/txbox/txbox/health"
	"github.com/txbox/txbox/tests/testenv"
	"github.com/txbox/txbox/txboxprom"
)

// metricsFor registers fresh txbox metrics in a registry of their own.
func metricsFor(t *testing.T) (*txboxprom.Metrics, *prometheus.Registry) {
	t.Helper()
	m := txboxprom.New(txboxprom.Config{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	return m, reg
}

// value returns the value of the series name{labels}: a counter's or
// gauge's value, a histogram's sample count; -1 when there is none.
func value(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	testenv.Must(t, err, "gather")
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			return sampleValue(f.GetType(), m)
		}
	}
	return -1
}

func sampleValue(typ dto.MetricType, m *dto.Metric) float64 {
	switch typ {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_HISTOGRAM:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return -1
}

// histogramSum returns a histogram's sum of samples.
func histogramSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	testenv.Must(t, err, "gather")
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) > 0 {
			return f.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	return -1
}

// eventually waits for cond (testenv.Await with nothing to show).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Await(t, what, func() (bool, string) { return cond(), "" })
}

// probe serves h and returns a GET of path: the status and body.
func probe(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	testenv.Must(t, err, "request")
	resp, err := http.DefaultClient.Do(req)
	testenv.Must(t, err, "GET %s", path)
	defer resp.Body.Close()
	var b []byte
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			break
		}
	}
	return resp.StatusCode, string(b)
}

func serve(t *testing.T, reg *prometheus.Registry, checks ...health.Check) *httptest.Server {
	srv := httptest.NewServer(health.Handler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), checks...))
	t.Cleanup(srv.Close)
	return srv
}

package integration

import (
	"testing"

	"github.com/sendonce/sendonce/fakeapi"
)

// apiKey is the OpenEmail key every sendonce process gets. It is easy to
// recognise, so the secrets check can look for it (and for its secret part
// alone, in case something strips the oe_test_ prefix) in everything the
// processes print and store.
const (
	apiKey       = "oe_test_SECRETk3yN0tForPrint1ng7f3a9c2e51d84b06"
	apiKeySecret = "SECRETk3yN0tForPrint1ng7f3a9c2e51d84b06"
)

// newFake starts the fake OpenEmail API in this process. It accepts only
// apiKey, and its probabilistic faults draw from a seed derived from the
// run's, so a failing run repeats with the same -seed.
func newFake(t testing.TB, name string, faults ...fakeapi.Fault) *fakeapi.Server {
	t.Helper()
	srv := fakeapi.NewTest(t, fakeapi.Config{
		APIKeys: []string{apiKey},
		Seed:    seedFor(name),
		Faults:  faults,
	})
	return srv
}

// mustFaults parses fault rules, failing the test on a bad one.
func mustFaults(t testing.TB, rules ...string) []fakeapi.Fault {
	t.Helper()
	var out []fakeapi.Fault
	for _, r := range rules {
		f, err := fakeapi.ParseFault(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// processEnv is the environment of a sendonce process working db against
// the fake.
func processEnv(dbURL string, srv *fakeapi.Server) env {
	return env{DatabaseURL: dbURL, APIKey: apiKey, BaseURL: srv.URL()}
}

package composecheck

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/sendonce/sendonce/client"
)

const root = "../../../.."

// load reads docker-compose.yml as `docker compose config` would, with env
// as the only environment (so defaults such as ${SENDONCE_UI_TOKEN:-…}
// apply unless env sets them).
func load(t *testing.T, env ...string) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root),
		cli.WithEnv(env),
	)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, err := p.GetService(name)
	if err != nil {
		t.Fatalf("service %s: %v", name, err)
	}
	return s
}

func env(t *testing.T, s types.ServiceConfig, name string) string {
	t.Helper()
	v, ok := s.Environment[name]
	if !ok || v == nil {
		t.Fatalf("service %s: no %s in its environment", s.Name, name)
	}
	return *v
}

func dependsOn(t *testing.T, s types.ServiceConfig, on, condition string) {
	t.Helper()
	dep, ok := s.DependsOn[on]
	if !ok {
		t.Errorf("service %s does not depend on %s", s.Name, on)
		return
	}
	if dep.Condition != condition {
		t.Errorf("service %s depends on %s with condition %q, want %q", s.Name, on, dep.Condition, condition)
	}
}

func TestServices(t *testing.T) {
	p := load(t)
	if p.Name != "sendonce" {
		t.Errorf("project name %q, want sendonce", p.Name)
	}
	names := p.ServiceNames()
	slices.Sort(names)
	if want := []string{"fake-api", "migrate", "postgres", "worker"}; !slices.Equal(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}

	pg := service(t, p, "postgres")
	if pg.Image != "postgres:15" {
		t.Errorf("postgres image %q, want postgres:15", pg.Image)
	}
	if pg.HealthCheck == nil || len(pg.HealthCheck.Test) < 2 || !strings.Contains(strings.Join(pg.HealthCheck.Test, " "), "pg_isready") {
		t.Errorf("postgres healthcheck %+v, want pg_isready", pg.HealthCheck)
	}

	// migrate, fake-api and worker run the image the Dockerfile builds.
	for _, name := range []string{"migrate", "fake-api", "worker"} {
		s := service(t, p, name)
		if s.Build == nil || s.Build.Context != mustAbs(t, root) {
			t.Errorf("service %s: build %+v, want the repository's Dockerfile", name, s.Build)
		}
	}

	migrate := service(t, p, "migrate")
	if !slices.Equal(migrate.Command, types.ShellCommand{"migrate"}) {
		t.Errorf("migrate command %q, want [migrate]", migrate.Command)
	}
	dependsOn(t, migrate, "postgres", types.ServiceConditionHealthy)

	fake := service(t, p, "fake-api")
	if got := append(slices.Clone(fake.Entrypoint), fake.Command...); !slices.Equal(got,
		[]string{"/usr/local/bin/openemail-fake", "--addr", "0.0.0.0:8025"}) {
		t.Errorf("fake-api runs %q, want openemail-fake --addr 0.0.0.0:8025", got)
	}
	for _, port := range []string{"8025", "9464"} {
		if !slices.ContainsFunc(fake.Ports, func(pc types.ServicePortConfig) bool {
			return pc.Published == port && pc.HostIP == "127.0.0.1"
		}) {
			t.Errorf("fake-api does not publish %s on 127.0.0.1: %+v", port, fake.Ports)
		}
	}

	worker := service(t, p, "worker")
	want := types.ShellCommand{"work", "--http-addr", "0.0.0.0:9464"}
	if !slices.Equal(worker.Command, want) {
		t.Errorf("worker command %q, want %q", worker.Command, want)
	}
	if worker.NetworkMode != "service:fake-api" {
		t.Errorf("worker network_mode %q, want service:fake-api (see TestWorkerReachesTheFakeOverLoopback)", worker.NetworkMode)
	}
	if len(worker.Ports) > 0 {
		t.Errorf("worker publishes ports %+v: in fake-api's network namespace it cannot; publish them on fake-api", worker.Ports)
	}
	dependsOn(t, worker, "migrate", types.ServiceConditionCompletedSuccessfully)
	dependsOn(t, worker, "fake-api", types.ServiceConditionStarted)

	// migrate and worker use the database postgres creates.
	for _, s := range []types.ServiceConfig{migrate, worker} {
		u, err := url.Parse(env(t, s, "DATABASE_URL"))
		if err != nil {
			t.Fatalf("service %s: DATABASE_URL: %v", s.Name, err)
		}
		pass, _ := u.User.Password()
		if u.Hostname() != "postgres" || u.Port() != "5432" || u.User.Username() != env(t, pg, "POSTGRES_USER") ||
			pass != env(t, pg, "POSTGRES_PASSWORD") || u.Path != "/"+env(t, pg, "POSTGRES_DB") {
			t.Errorf("service %s: DATABASE_URL %s does not match the postgres service", s.Name, u.Redacted())
		}
	}
	if tok := env(t, worker, "SENDONCE_UI_TOKEN"); tok != "change-me" {
		t.Errorf("worker SENDONCE_UI_TOKEN %q, want the default change-me", tok)
	}
	if key := env(t, worker, "OPENEMAIL_API_KEY"); !strings.HasPrefix(key, "oe_test_") {
		t.Errorf("worker OPENEMAIL_API_KEY %q: want a test key (oe_test_…) for the fake", key)
	}
}

func TestUITokenFromTheEnvironment(t *testing.T) {
	worker := service(t, load(t, "SENDONCE_UI_TOKEN=s3cret-token"), "worker")
	if tok := env(t, worker, "SENDONCE_UI_TOKEN"); tok != "s3cret-token" {
		t.Errorf("worker SENDONCE_UI_TOKEN %q, want s3cret-token from the environment", tok)
	}
}

// TestWorkerReachesTheFakeOverLoopback checks the worker's base URL against
// the client's own rule: the API key goes over plain http only to a
// loopback host. network_mode "service:fake-api" is what makes the
// loopback address reach the fake; the service name would be refused.
func TestWorkerReachesTheFakeOverLoopback(t *testing.T) {
	worker := service(t, load(t), "worker")
	base := env(t, worker, "OPENEMAIL_BASE_URL")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() != "8025" {
		t.Errorf("OPENEMAIL_BASE_URL %s: want the fake's port 8025", base)
	}
	key := env(t, worker, "OPENEMAIL_API_KEY")

	if err := try(t, key, base); err != nil {
		t.Errorf("the client refuses the worker's OPENEMAIL_BASE_URL %s: %v", base, err)
	}
	if err := try(t, key, "http://fake-api:8025"); !errors.Is(err, client.ErrInsecureBaseURL) {
		t.Errorf("http://fake-api:8025: err = %v, want ErrInsecureBaseURL (else network_mode is not needed)", err)
	}
}

// try makes one call with the client, through a transport that answers
// without a network, and returns the client's error unless the request
// reached the transport.
func try(t *testing.T, key, base string) error {
	t.Helper()
	reached := false
	c, err := client.New(client.WithAPIKey(key), client.WithBaseURL(base), client.WithMaxRetries(0),
		client.WithHTTPClient(&http.Client{Transport: roundTrip(func(*http.Request) (*http.Response, error) {
			reached = true
			return nil, errors.New("no network in this test")
		})}))
	if err != nil {
		return err
	}
	_, err = c.Emails.Get(context.Background(), "em_1")
	if reached {
		return nil
	}
	return err
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestDockerfile checks the image the compose file relies on: built with
// the Go of the go.mod files and go.work, from the whole workspace, holding
// both binaries where the services run them.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{
		"FROM golang:1.26 AS build",
		// The workspace: without go.work, cmd/go.mod's placeholder
		// version of the library does not build.
		"COPY go.work go.work.sum go.mod go.sum ./",
		"COPY cmd/go.mod cmd/go.sum ./cmd/",
		"./cmd/sendonce ./cmd/openemail-fake",
		"/usr/local/bin/",
		`ENTRYPOINT ["/usr/local/bin/sendonce"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile has no %q", want)
		}
	}
	for _, f := range []string{"go.mod", "cmd/go.mod", "go.work"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "\ngo 1.26") && !strings.HasPrefix(string(b), "go 1.26") {
			t.Errorf("%s no longer says go 1.26: update the Dockerfile's golang image with it", f)
		}
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

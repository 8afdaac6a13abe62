# syntax=docker/dockerfile:1
#
# One image, both commands: sendonce (migrate, work, status, ...) and
# openemail-fake, the fake OpenEmail API. docker-compose.yml runs it as the
# migrate, worker and fake-api services.
#
#   docker build -t sendonce .
#   docker run --rm sendonce --help
#   docker run --rm --entrypoint openemail-fake sendonce --help

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so a change to the code does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Static binaries (pgx is pure Go), so the runtime image needs no libc.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/sendonce ./cmd/openemail-fake

# Distroless: no shell, no package manager, a non-root user; CA certificates
# for the real API's https.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sendonce /out/openemail-fake /usr/local/bin/
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/sendonce"]
CMD ["--help"]

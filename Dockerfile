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
# Modules first, so a change to the code does not download them again: the
# workspace (go.work) of the library's module and the command's (cmd/).
COPY go.work go.work.sum go.mod go.sum ./
COPY cmd/go.mod cmd/go.sum ./cmd/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Static binaries (pgx is pure Go), so the runtime image needs no libc.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/sendonce ./cmd/openemail-fake

# A slim Debian with CA certificates (for the real API's https) and a
# non-root user; the binaries are static.
FROM debian:12-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/sendonce /out/openemail-fake /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/sendonce"]
CMD ["--help"]

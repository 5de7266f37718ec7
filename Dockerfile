# syntax=docker/dockerfile:1
#
# cpsguard container: a static binary on distroless, running as non-root.
#
#   docker build --build-arg VERSION="$(scripts/version.sh)" --build-arg REVISION="$(git rev-parse HEAD)" \
#     -t cpsguard:"$(scripts/version.sh)" .
#   docker run --rm -v $PWD/my.yaml:/etc/cpsguard/cpsguard.yaml:ro \
#     -p 5060:5060/udp -p 5060:5060/tcp -p 127.0.0.1:9090:9090 cpsguard
#
# No configuration is baked in: mount yours at /etc/cpsguard/cpsguard.yaml.
# Inside a container it must listen on all interfaces (sip.listen
# udp://0.0.0.0:5060, http.listen 0.0.0.0:9090) and should set http.token
# (CPSGUARD_HTTP_TOKEN). Pass secrets as CPSGUARD_* environment variables.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Dependencies first, so source edits do not re-download them.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
# The commit, for `cpsguard version` and cpsguard_build_info{revision}: the
# context has no .git (.dockerignore), so Go cannot stamp it itself.
ARG REVISION=
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=linux go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${REVISION}" \
      -o /out/cpsguard ./cmd/cpsguard

# distroless/static: no shell, no libc (the binary is static), CA certificates
# and /etc/passwd with the nonroot user (65532).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/cpsguard /usr/local/bin/cpsguard
USER 65532:65532
# SIP (UDP and TCP) and the operations HTTP server (/metrics, /api/v1/...).
EXPOSE 5060/udp 5060/tcp 9090
# distroless has no shell or curl: the binary probes /readyz itself (exit 0
# ready, 1 not: starting, draining, or its store unusable under on_error
# reject). It finds the node from http.listen in the file, on loopback when
# that is 0.0.0.0, or from CPSGUARD_HTTP_LISTEN.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/cpsguard", "probe", "--config", "/etc/cpsguard/cpsguard.yaml"]
ENTRYPOINT ["/usr/local/bin/cpsguard", "serve", "--config", "/etc/cpsguard/cpsguard.yaml"]

# kvhint: one static binary for the manager, the sidecar and the CLI.
#
# A custom build with more plugins builds with this file unchanged from its
# own module's root, where ./cmd/kvhint is its own main. A module that
# still needs a replace (a local checkout of kv-hint-operator) runs
# `go mod vendor` first: vendor/ then holds the replaced module's packages,
# the build uses it and downloads nothing, and the build context is the
# module's directory alone.
FROM golang:1.26 AS build
WORKDIR /src
COPY . .
RUN if [ -f vendor/modules.txt ]; then echo "kvhint: building from vendor/"; else go mod download; fi
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/kvhint ./cmd/kvhint

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kvhint /kvhint
USER 65532:65532
ENTRYPOINT ["/kvhint"]

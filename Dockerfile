# kvhint: one static binary for the manager, the sidecar and the CLI.
# A custom build with more plugins swaps ./cmd/kvhint for its own main.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/kvhint ./cmd/kvhint

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kvhint /kvhint
USER 65532:65532
ENTRYPOINT ["/kvhint"]

# Build: docker build -t checkpointd .
# Run:   docker run -p 4222:4222 -p 9333:9333 -v checkpointd-data:/data checkpointd
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/checkpointd ./cmd/checkpointd \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/checkpointctl ./cmd/checkpointctl

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/checkpointd /out/checkpointctl /usr/local/bin/
VOLUME /data
EXPOSE 4222 9333
# Listen on all interfaces inside the container; publish only the ports you mean to expose.
ENV CHECKPOINTD_DATA_DIR=/data \
    CHECKPOINTD_NATS_LISTEN=0.0.0.0:4222 \
    CHECKPOINTD_HTTP_LISTEN=0.0.0.0:9333
ENTRYPOINT ["/usr/local/bin/checkpointd"]

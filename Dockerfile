# Build: docker build -t checkpointd .
# Run:   docker run -p 4222:4222 -p 9333:9333 -v checkpointd-data:/data checkpointd
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
# .dockerignore keeps local data directories, bin/ and .git out of this copy.
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/checkpointd ./cmd/checkpointd \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/checkpointctl ./cmd/checkpointctl \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/checkpointd /out/checkpointctl /usr/local/bin/
# /data belongs to the user the daemon runs as: a fresh named volume mounted there is initialised
# from the image's directory, owner included, so the daemon can write it.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
VOLUME /data
EXPOSE 4222 9333
# Listen on all interfaces inside the container; publish only the ports you mean to expose.
ENV CHECKPOINTD_DATA_DIR=/data \
    CHECKPOINTD_NATS_LISTEN=0.0.0.0:4222 \
    CHECKPOINTD_HTTP_LISTEN=0.0.0.0:9333
# The image has no shell or curl: the binary asks its own /healthz (on CHECKPOINTD_HTTP_LISTEN).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/checkpointd", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/checkpointd"]

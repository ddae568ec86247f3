# ramstore: the release binary on a slim Debian base (multi-stage build).
#
#   docker build -t ramstore .
#   docker compose up          # etcd, a coordinator and 4 storage servers: compose.yaml
#
# Not built in CI (no container registry is reachable there): keep this minimal.
# See docs/deployment.md.

FROM rust:1-slim-bookworm AS build
# protoc: etcd-client's build script (the coordinator's etcd store) needs it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin ramstore \
    && cp target/release/ramstore /usr/local/bin/ramstore

FROM debian:bookworm-slim
# The server's --backup-dir lives under /var/lib/ramstore (a volume): made here so a
# named volume mounted there starts out owned by the ramstore user.
RUN useradd --system --home-dir /var/lib/ramstore --create-home ramstore \
    && install -d -o ramstore -g ramstore /var/lib/ramstore/server
COPY --from=build /usr/local/bin/ramstore /usr/local/bin/ramstore
COPY LICENSE /usr/share/doc/ramstore/LICENSE
USER ramstore
WORKDIR /var/lib/ramstore
# 7000: coordinator; 11100: a storage server's native port; 6379: its Redis port
# (with --resp-listen); 9100: its Prometheus metrics (with --metrics-listen).
EXPOSE 7000 11100 6379 9100
ENTRYPOINT ["ramstore"]
CMD ["--help"]

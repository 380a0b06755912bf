# Kiln's `kiln serve` in a small image: built in a Rust image, run as a non-root user in a
# slim Debian one. The model comes from a mounted volume (KILN_CACHE_DIR or --model /path)
# or is fetched by name into that directory on first start.
#
#   docker build -t kiln .
#   docker run -p 8080:8080 -p 5557:5557 -v kiln-models:/models kiln \
#       --model smollm2-135m --kv-events 'tcp://*:5557'
#
# The build steps are plain commands (`cargo build --release --locked -p kiln-cli`), the
# same ones CI runs without Docker.

# syntax=docker/dockerfile:1

FROM rust:1.95.0-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p kiln-cli \
 && install -D -m 0755 target/release/kiln /out/kiln

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 kiln \
 && useradd --system --uid 10001 --gid kiln --home-dir /models --shell /usr/sbin/nologin kiln \
 && mkdir -p /models \
 && chown kiln:kiln /models
COPY --from=build /out/kiln /usr/local/bin/kiln
ENV KILN_CACHE_DIR=/models
VOLUME ["/models"]
USER 10001:10001
EXPOSE 8080 5557
ENTRYPOINT ["/usr/local/bin/kiln", "serve", "--host", "0.0.0.0", "--port", "8080"]
CMD ["--model", "smollm2-135m", "--shutdown-delay", "5"]

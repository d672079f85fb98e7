# syntax=docker/dockerfile:1
#
# The terrace image: one static `terrace` binary at /usr/local/bin/terrace and nothing
# else (distroless: CA certificates, /etc/passwd with the nonroot user 65532, no shell).
# It runs as the operator (`terrace operator`), the API server (`terrace api-server`) and,
# in test Pods, as the init containers (see operator/src/testpod.rs):
#   - `install-terrace` runs `/usr/local/bin/terrace runner install /terrace/terrace`:
#     the binary copies itself into the shared volume, so no `cp` or shell is needed;
#   - the engine container (OpenTofu/Terraform image) then runs that copy, so the binary
#     must be static (musl): it runs on whatever libc the engine image has, or none.
#
#   docker build -t ghcr.io/terrace-dev/terrace:$(version) .
#
# Builds for the platform it runs on (`docker buildx build --platform linux/arm64` builds
# an aarch64 binary under emulation).

FROM rust:1-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    target="$(uname -m)-unknown-linux-musl"; \
    rustup target add "$target"; \
    export "CC_${target//-/_}=musl-gcc"; \
    cargo build --release --locked -p terrace --features vendored-openssl --target "$target"; \
    install -D -m 0755 "target/$target/release/terrace" /out/terrace; \
    /out/terrace --version

FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="terrace" \
      org.opencontainers.image.description="A Kubernetes-native HCP Terraform / TFE API for workspaces and module tests" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/terrace /usr/local/bin/terrace
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/terrace"]
CMD ["--help"]

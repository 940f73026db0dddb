FROM x
HEALTHCHECK --interval=5m --timeout=3s --start-period=30s --start-interval=5s --retries=3 \
  CMD curl -f http://localhost/ || exit 1
HEALTHCHECK CMD ["curl", "-f", "http://localhost/"]

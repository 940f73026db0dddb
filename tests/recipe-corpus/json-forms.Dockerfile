FROM x
RUN ["apt-get", "install", "-y", "gcc"]
CMD ["python3", "-m", "http.server"]
ENTRYPOINT ["/docker-entrypoint.sh"]
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
CMD []

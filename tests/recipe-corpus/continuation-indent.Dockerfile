FROM debian
RUN apt-get update && \
    apt-get install -y \
        gcc \
        make

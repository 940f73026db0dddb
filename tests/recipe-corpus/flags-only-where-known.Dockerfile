FROM x
WORKDIR --weird
CMD --help

# A stage name used twice parses: BuildKit's DuplicateStageName check is a
# warning, and the build goes on (FROM finds the last earlier stage of the
# name, COPY --from and --target the last one of the file).
FROM busybox AS base
RUN echo one > /which
FROM busybox AS Base
RUN echo two > /which
FROM base
COPY --from=base /which /copied

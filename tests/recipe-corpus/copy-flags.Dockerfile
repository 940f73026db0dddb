FROM x AS build
FROM scratch
COPY --from=build --chown=55:mygroup --chmod=644 /src/a /src/b /dst/
COPY --link --parents=true ./x/./y/ /z/
COPY --exclude=*.md --exclude=tmp/ . /app
COPY --from=0 --link=false a b

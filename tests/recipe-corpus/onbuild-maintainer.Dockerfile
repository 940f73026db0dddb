FROM x
ONBUILD maintainer me

FROM x
SHELL /bin/bash -c

FROM x AS build
OUTPUT type=local,dest=dist,src=/src/dist
OUTPUT Type=image,NAME=orion-client:cu9.0
OUTPUT type=oci dest=out/oci "name=a,b"

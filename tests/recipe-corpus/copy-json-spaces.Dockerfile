FROM x
COPY ["hom* dir", "/my dir/"]
ADD [ "a.txt", "b c.txt", "/dst/" ]
COPY "quoted name" /dst/

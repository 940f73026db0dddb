FROM x
MAINTAINER SvenDowideit@home.org.au
MAINTAINER John Doe <jd@example.com>

FROM alpine AS 1st

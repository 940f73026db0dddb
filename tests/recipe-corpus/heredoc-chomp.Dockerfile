FROM x
RUN <<-EOF
	echo tab
		echo two tabs
	EOF
RUN cat <<-END >/f
	x
END

"""A pystorm bolt that emits every input again, anchored to it, and acks it: the multilang benchmark's
pass-through (bench/bench_multilang.py). Storm's classic form runs it as ``python3 passthrough.py``; streamparse's
as ``streamparse_run [-s msgpack] passthrough.PassThrough`` (both in the package's resources/ directory)."""

from pystorm import Bolt


class PassThrough(Bolt):
    def process(self, tup):
        self.emit(tup.values)


if __name__ == "__main__":
    PassThrough().run()

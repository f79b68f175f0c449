"""Every rank blocks in a receive nobody sends: the per-test watchdog must end the job."""


def test_every_rank_waits_forever(comm):
    comm.recv(source=(comm.rank + 1) % comm.size, tag=77)

"""calibrate() across the test bed (2 hosts x 2 ranks): two levels, "host" (shared memory) faster than
"net" (TCP between namespaces); a mesh ("data", hosts) x ("model", ranks per host) costs its "model"
axis at the host's link and its "data" axis at the network's."""
import kiln
from common import check, ok

r, n = kiln.dist.rank(), kiln.dist.size()
cost = kiln.dist.calibrate(gemm=128, stream_mb=2, reps=3)
names = [lv.name for lv in cost.levels]
check(names == ["host", "net"], f"levels {cost.levels}")
host, net = cost.level("host"), cost.level("net")
check(host.ranks == 2 and net.ranks == 2, f"level sizes: {cost.levels}")
check(host.link_bytes_per_s > net.link_bytes_per_s, f"inside a host slower than across: {cost.levels}")
check(cost.hosts == [0, 0, 1, 1], f"ranks' hosts {cost.hosts}")
mesh = kiln.dist.Mesh(("data", 2), ("model", 2))
check(cost.axis_level(mesh, "model") == "host" and cost.axis_level(mesh, "data") == "net", "axes to levels")
per_axis = cost.for_mesh(mesh)
check(per_axis["link_bytes_per_s:model"] == host.link_bytes_per_s and per_axis["latency_s:data"] == net.latency_s, f"{per_axis}")
check(kiln.dist.Mesh(("all", 4)) and cost.axis_level(kiln.dist.Mesh(("all", 4)), "all") == "net", "a ring over every rank crosses hosts")
if r == 0:
    print("levels:", cost.levels, flush=True)
ok()

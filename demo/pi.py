# Estimates pi with Ray tasks spread over every node of the job's cluster.
import random, socket, time
import ray

ray.init()  # RAY_ADDRESS (and the cluster's auth token) come from syndeo

# SPREAD: one task per node in turn, so that every node works.
@ray.remote(scheduling_strategy="SPREAD")
def sample(n):
    inside = sum(1 for _ in range(n) if random.random() ** 2 + random.random() ** 2 <= 1.0)
    return inside, socket.gethostname()

nodes = [n for n in ray.nodes() if n["Alive"]]
print(f"{len(nodes)} nodes, {int(ray.cluster_resources()['CPU'])} CPUs")
t = time.time()
results = ray.get([sample.remote(200_000) for _ in range(24)])
inside = sum(r[0] for r in results)
hosts = sorted({r[1] for r in results})
print(f"PI_ESTIMATE {4 * inside / (24 * 200_000):.4f} from tasks on {', '.join(hosts)} in {time.time() - t:.1f}s")

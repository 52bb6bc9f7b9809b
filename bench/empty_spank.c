/* The srun benchmark's yardstick: a SPANK plugin whose job prolog and epilog
 * hooks do nothing. Whenever a plugin in plugstack has such hooks, slurmd runs
 * every job's prolog and epilog through a `slurmstepd spank` process of its
 * own, so this plugin costs a job what any plugin with those hooks must. */
#include <slurm/spank.h>

SPANK_PLUGIN(bench_empty, 1);

int slurm_spank_job_prolog(spank_t sp, int ac, char **av) { return 0; }

int slurm_spank_job_epilog(spank_t sp, int ac, char **av) { return 0; }

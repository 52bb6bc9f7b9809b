#!/bin/bash
#SBATCH --job-name=syndeo-demo
# By the time this runs, syndeo has started a Ray cluster on all of the job's
# nodes and set RAY_ADDRESS; `srun --syndeo` runs the driver in the image.
echo "Ray cluster: RAY_ADDRESS=$RAY_ADDRESS head=$SYNDEO_HEAD nodes=$SYNDEO_NODES"
srun --syndeo -N1 -n1 python3 pi.py

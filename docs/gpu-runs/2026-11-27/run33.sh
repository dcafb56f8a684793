#!/usr/bin/env bash
# 2026-11-27, run 33 (bundle of run 32): the README's main job on CUDA (`biogpu demo`, whose
# perfusion part fits the built-in synthetic liver with LM on the device and checks it
# against the CPU and the truth), and the CLI's perfusion fit on a simulated series.
set -u
B=/tmp/r33; rm -rf $B; mkdir -p $B && tar -C $B -xJf .gpu-xz/bundle.tar.xz; cd $B
export BIOGPU_KERNEL_CACHE=/tmp/kc33
timeout 120 ./biogpu --device cuda demo --out /tmp/demo > $OUT/demo.log 2>&1; echo "demo rc=$?" >> $OUT/demo.log
grep -iE "perfusion|rc=" $OUT/demo.log | head -20
timeout 60 ./biogpu perfusion simulate --liver --nt 64 --cnr 40 --out /tmp/liver > $OUT/sim.log 2>&1; echo "sim rc=$?" >> $OUT/sim.log
for m in nm lm; do
  timeout 60 ./biogpu --device cuda perfusion fit --dce /tmp/liver/dce.nii.gz --mask /tmp/liver/mask.nii.gz \
    --aif /tmp/liver/inputs.csv:aif --pv /tmp/liver/inputs.csv:pv --method $m --out /tmp/fit-$m > $OUT/fit-$m.log 2>&1; echo "fit $m rc=$?" >> $OUT/fit-$m.log
  tail -4 $OUT/fit-$m.log
done
tail -2 $OUT/sim.log

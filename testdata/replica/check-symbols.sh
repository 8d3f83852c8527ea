#!/usr/bin/env bash
# check-symbols.sh DIR [TTNN_ERA]: checks that DIR/libtt_metal.so exports (.dynsym) every symbol tttrace
# probes or reads, that no probed function starts with a lock-prefixed instruction (a uprobe
# cannot single-step it), and reports where each probed function is called from inside the
# library (a function inlined into its callers there is reported as such: its probe would only
# fire for calls from outside).
set -euo pipefail
dir=${1:?usage: check-symbols.sh DIR}
lib=$dir/libtt_metal.so
[ -f "$lib" ] || { echo "check-symbols: $lib not found" >&2; exit 1; }

nmout=$(nm -D --defined-only "$lib")
syms=$(awk '{print $NF}' <<<"$nmout")
fail=0

# LAYOUT=V0 builds put tt::tt_metal in namespace v0: the names below are written without it and
# rewritten here (insert 2v0 after tt_metal, shift the substitutions S0_, S1_ by one).
v0=
if grep -q '^_ZN2tt8tt_metal2v0' <<<"$syms"; then v0=1; echo "note    symbols in namespace tt::tt_metal::v0 (LAYOUT=V0)"; fi
ns() {
  if [ -z "$v0" ]; then echo "$1"; return; fi
  sed -E -e 's/^(_ZN|_ZNK|_ZTVN)2tt8tt_metal/\12tt8tt_metal2v0/' -e 's/S1_/S2_/g' -e 's/S0_/S1_/g' <<<"$1"
}

exact=(
  _ZN2tt8tt_metal12GraphTracker14track_allocateEPKNS0_6BufferE
  _ZN2tt8tt_metal12GraphTracker16track_deallocateEPNS0_6BufferE
  _ZN2tt8tt_metal12GraphTracker17track_allocate_cbERK12CoreRangeSetmmbPKNS0_7IDeviceE
  _ZN2tt8tt_metal12GraphTracker19track_deallocate_cbEPKNS0_7IDeviceE
  _ZN2tt8tt_metal12GraphTracker13hook_allocateEPKNS0_6BufferE
  _ZN2tt8tt_metal12GraphTracker8instanceEv
  _ZN2tt8tt_metal6Buffer13allocate_implEv
  _ZN2tt8tt_metal6Buffer15deallocate_implEv
  _ZN2tt8tt_metal6Buffer19mark_as_deallocatedEv
  _ZN2tt8tt_metal6Buffer10deallocateEv
  _ZNK2tt8tt_metal6Buffer7addressEv
  _ZNK2tt8tt_metal6Buffer12is_allocatedEv
  _ZNK2tt8tt_metal6Buffer9page_sizeEv
  _ZNK2tt8tt_metal6Buffer8is_traceEv
  _ZNK2tt8tt_metal6Buffer7is_dramEv
  _ZNK2tt8tt_metal6Buffer5is_l1Ev
  _ZN2tt8tt_metal6detail11ProgramImpl25allocate_circular_buffersEPKNS0_7IDeviceE
  _ZN2tt8tt_metal6detail11ProgramImpl27deallocate_circular_buffersEv
  _ZN2tt8tt_metal6detail11ProgramImplD2Ev
  _ZN2tt8tt_metal6Device5closeEv
  _ZN2tt8tt_metal11distributed10MeshDevice5closeEv
  _ZN2tt8tt_metal6Device11begin_traceEhj
  _ZN2tt8tt_metal6Device9end_traceEhj
  _ZN2tt8tt_metal6Device12replay_traceEhjbb
  _ZN2tt8tt_metal6Device13release_traceEj
  _ZN2tt8tt_metal11distributed10MeshDevice16begin_mesh_traceEh
  _ZN2tt8tt_metal11distributed10MeshDevice16begin_mesh_traceEhRKN4ttsl10StrongTypeIjNS1_14MeshTraceIdTagEEE
  _ZN2tt8tt_metal11distributed10MeshDevice14end_mesh_traceEhRKN4ttsl10StrongTypeIjNS1_14MeshTraceIdTagEEE
  _ZN2tt8tt_metal11distributed10MeshDevice17replay_mesh_traceEhRKN4ttsl10StrongTypeIjNS1_14MeshTraceIdTagEEEb
  _ZN2tt8tt_metal11distributed10MeshDevice18release_mesh_traceERKN4ttsl10StrongTypeIjNS1_14MeshTraceIdTagEEE
  _ZNK2tt8tt_metal6Device2idEv
  _ZNK2tt8tt_metal11distributed10MeshDevice2idEv
  _ZTVN2tt8tt_metal6DeviceE
  _ZTVN2tt8tt_metal11distributed10MeshDeviceE
  _ZN2tt8tt_metal11g_instancesE
  tt_replica_write_truth
  tt_replica_mark_attach
)
prefixes=(
  _ZN2tt8tt_metal6Buffer6createEPNS0_7IDeviceEmmNS0_10BufferTypeE
  _ZN2tt8tt_metal6Buffer6createEPNS0_7IDeviceEmmmNS0_10BufferTypeE
)

for s in "${exact[@]}"; do
  s=$(ns "$s")
  if grep -qxF "$s" <<<"$syms"; then
    echo "ok      $s  $(c++filt "$s")"
  else
    echo "MISSING $s  $(c++filt "$s")"; fail=1
  fi
done
for p in "${prefixes[@]}"; do
  p=$(ns "$p")
  m=$(grep -m1 "^$p" <<<"$syms" || true)
  if [ -n "$m" ]; then
    echo "ok      $m  $(c++filt "$m")"
  else
    echo "MISSING $p*"; fail=1
  fi
done
if grep -qxF _ZNK2tt8tt_metal6Buffer4sizeEv <<<"$syms"; then
  echo "note    Buffer::size() const is exported (OUTOFLINE_SIZE or LAYOUT=V2 build; upstream V1 has it inline)"
fi

# Entry instructions and call sites of the probed functions.
probed=(
  _ZN2tt8tt_metal12GraphTracker14track_allocateEPKNS0_6BufferE
  _ZN2tt8tt_metal12GraphTracker16track_deallocateEPNS0_6BufferE
  _ZN2tt8tt_metal12GraphTracker17track_allocate_cbERK12CoreRangeSetmmbPKNS0_7IDeviceE
  _ZN2tt8tt_metal12GraphTracker19track_deallocate_cbEPKNS0_7IDeviceE
  "$(grep -m1 "^$(ns _ZN2tt8tt_metal6Buffer6createEPNS0_7IDeviceEmmmNS0_10BufferTypeE)" <<<"$syms" || echo none)"
  _ZN2tt8tt_metal6Buffer13allocate_implEv
  _ZN2tt8tt_metal6Buffer15deallocate_implEv
  _ZN2tt8tt_metal6Buffer19mark_as_deallocatedEv
  _ZN2tt8tt_metal6detail11ProgramImpl25allocate_circular_buffersEPKNS0_7IDeviceE
  _ZN2tt8tt_metal6detail11ProgramImpl27deallocate_circular_buffersEv
  _ZN2tt8tt_metal6detail11ProgramImplD2Ev
  _ZN2tt8tt_metal6Device5closeEv
  _ZN2tt8tt_metal11distributed10MeshDevice5closeEv
  _ZN2tt8tt_metal6Device11begin_traceEhj
  _ZN2tt8tt_metal6Device9end_traceEhj
  _ZN2tt8tt_metal6Device12replay_traceEhjbb
  _ZN2tt8tt_metal6Device13release_traceEj
  _ZN2tt8tt_metal11distributed10MeshDevice16begin_mesh_traceEh
  _ZN2tt8tt_metal11distributed10MeshDevice16begin_mesh_traceEhRKN4ttsl10StrongTypeIjNS1_14MeshTraceIdTagEEE
  _ZN2tt8tt_metal11distributed10MeshDevice14end_mesh_traceEhRKN4ttsl10StrongTypeIjNS1_14MeshTraceIdTagEEE
  _ZN2tt8tt_metal11distributed10MeshDevice17replay_mesh_traceEhRKN4ttsl10StrongTypeIjNS1_14MeshTraceIdTagEEEb
  _ZN2tt8tt_metal11distributed10MeshDevice18release_mesh_traceERKN4ttsl10StrongTypeIjNS1_14MeshTraceIdTagEEE
)
dis=$(mktemp)
trap 'rm -f "$dis"' EXIT
objdump -d --no-show-raw-insn "$lib" >"$dis"
for s in "${probed[@]}"; do
  [[ "$s" == _ZN2tt8tt_metal2v0* ]] || s=$(ns "$s")
  addr=$(awk -v s="$s" '$NF==s && !done {print $1; done=1}' <<<"$nmout")
  [ -n "$addr" ] || continue
  start=$((16#$addr))
  first=$(objdump -d --no-show-raw-insn --start-address=$start --stop-address=$((start + 16)) "$lib" |
          awk -F'\t' '/^ *[0-9a-f]+:\t/ && !done {print $2; done=1}')
  if [[ "$first" == lock* || -z "$first" ]]; then
    echo "BADENTRY $(c++filt "$s"): first instruction '$first'"; fail=1
  fi
  # Direct calls inside the library (through the PLT or straight to the address).
  sites=$(grep -cE "(call|jmp) +[0-9a-f]+ <($s(@plt)?|0*$addr)>" "$dis" || true)
  sites2=$(grep -cE "(call|jmp) +0*$addr( |$)" "$dis" || true)
  echo "entry   $(c++filt "$s" | cut -c1-90): '$first', direct call/jump sites in lib: $((sites + sites2))"
done

# The TT-NN stand-in (TTNN_ERA builds, README "TT-NN"): the op functions of the era it claims
# (the second argument, else what _ttnn.so says), in .dynsym, each entered by a plain instruction.
ttnncpp=$dir/_ttnncpp.so
if [ -f "$ttnncpp" ]; then
  era=${2:-$(python3 -c 'import ctypes,sys; m=ctypes.CDLL(sys.argv[1]); m.ttnn_era.restype=ctypes.c_char_p; print(m.ttnn_era().decode())' "$dir/_ttnn.so")}
  echo "note    TT-NN stand-in, era $era"
  tsyms=$(nm -D --defined-only "$ttnncpp" | awk '{print $NF}')
  msyms=$(nm -D --defined-only "$dir/_ttnn.so" | awk '{print $NF}')
  T='ERKN2tt8tt_metal6TensorE'
  dop=(MatmulDeviceOperation BinaryDeviceOperation Conv2dDeviceOperation ReshardDeviceOperation SplitDeviceOperation)
  qual=(INS_10operations6matmul21 INS_10operations6binary21 INS_10operations4conv6conv2d21 INS_10operations13data_movement22 INS_10operations13data_movement20)
  ops=() ; rtti=()
  case "$era" in
  2026)
    ops=("_ZN4ttnn6matmul${T}S4_bb" "_ZN4ttnn3add${T}S4_" "_ZN4ttnn6conv2d${T}S4_" "_ZN4ttnn7reshard${T}j" "_ZN4ttnn5split${T}jm")
    for d in 21MatmulDeviceOperation 23BinaryNgDeviceOperation 21Conv2dDeviceOperation 22ReshardDeviceOperation 20SplitDeviceOperation; do
      ops+=("_ZN4ttnn16device_operation6detail6launchINS_4prim${d}EEENT_21tensor_return_value_tERKNS5_22operation_attributes_tERKNS5_13tensor_args_tE*")
      ops+=("_ZN4ttnn16device_operation6detail29launch_operation_with_adapterINS0_26MeshDeviceOperationAdapterINS_4prim${d}EEEEEv*")
    done
    ops+=("_ZN4ttnn4prim6matmul${T}S5_RKNS0_12MatmulParamsE" "_ZN4ttnn4prim9binary_ng${T}S5_RKNS0_14BinaryNgParamsE")
    # bind_function's wrapper classes: unique_wrapper_base<"matmul", "ttnn.">, ...
    rtti=("_ZTIN4ttnn19unique_wrapper_baseIXtlNS_13unique_stringILm7EEEtlSt5arrayIcLm7EEtlA7_cLc109ELc97ELc116ELc109ELc117ELc108EEEEEXtlNS1_ILm6EEEtlS3_IcLm6EEtlA6_cLc116ELc116ELc110ELc110ELc46EEEEEEE")
    ;;
  2025|g1)
    q='N2tt3stl10StrongTypeIhNS_10QueueIdTagEEE'; [ "$era" = g1 ] && q=h
    ops=("_ZN4ttnn10operations6matmul15MatmulOperation6invoke${T}S7_bb"
         "_ZN4ttnn10operations6binary15BinaryOperationILNS1_12BinaryOpTypeE0EE6invoke${T}S9_"
         "_ZN4ttnn10operations4conv6conv2d15Conv2dOperation6invoke${T}S8_"
         "_ZN4ttnn10operations13data_movement16ReshardOperation6invoke${T}j"
         "_ZN4ttnn10operations13data_movement14SplitOperation6invoke${T}jm")
    for i in "${!dop[@]}"; do
      d=${qual[$i]}${dop[$i]}
      ops+=("_ZN4ttnn16device_operation6detail6invoke${d}EEENT_21tensor_return_value_tE${q}*")
      ops+=("_ZN4ttnn16device_operation6detail23launch_on_single_device${d}EEENT_21tensor_return_value_tE${q}*")
      if [ "$era" = 2025 ]; then
        ops+=("_ZN4ttnn16device_operation6detail29launch_operation_with_adapterINS0_26MeshDeviceOperationAdapter${d}EEEEEv${q}*")
      fi
    done
    # registered_operation_t<reflect::fixed_string "ttnn::matmul", MatmulOperation[, false]>
    m='_ZTIN4ttnn10decorators22registered_operation_tIXtlN7reflect6v1_1_112fixed_stringIcLm12EEEtlA13_cLc116ELc116ELc110ELc110ELc58ELc58ELc109ELc97ELc116ELc109ELc117ELc108EEEENS_10operations6matmul15MatmulOperationE'
    if [ "$era" = g1 ]; then rtti=("${m}Lb0EEE"); else rtti=("${m}EE"); fi
    ;;
  *) echo "MISSING TT-NN era: '$era'"; fail=1 ;;
  esac
  tdis=$(mktemp)
  objdump -d --no-show-raw-insn "$ttnncpp" >"$tdis"
  tnm=$(nm -D --defined-only "$ttnncpp")
  for o in "${ops[@]}"; do
    if [[ "$o" == *'*' ]]; then
      m=$(grep -m1 "^${o%\*}" <<<"$tsyms" || true)
    else
      m=$(grep -m1 -xF "$o" <<<"$tsyms" || true)
    fi
    if [ -z "$m" ]; then echo "MISSING $o"; fail=1; continue; fi
    addr=$(awk -v s="$m" '$NF==s {print $1; exit}' <<<"$tnm")
    start=$((16#$addr))
    first=$(objdump -d --no-show-raw-insn --start-address=$start --stop-address=$((start + 16)) "$ttnncpp" |
            awk -F'\t' '/^ *[0-9a-f]+:\t/ && !done {print $2; done=1}')
    if [[ "$first" == lock* || -z "$first" ]]; then echo "BADENTRY $(c++filt "$m" | cut -c1-90): '$first'"; fail=1; fi
    sites=$(grep -cE "(call|jmp) +[0-9a-f]+ <$m(@plt)?>" "$tdis" || true)
    echo "ok      $(c++filt "$m" | cut -c1-110)  entry '$first', direct call/jump sites in lib: $sites"
  done
  rm -f "$tdis"
  for r in "${rtti[@]}"; do
    if grep -qxF "$r" <<<"$msyms"; then echo "ok      $(c++filt "$r" | cut -c1-110) (_ttnn.so)"; else echo "MISSING $r (_ttnn.so)"; fail=1; fi
  done
  s=$(ns _ZN2tt8tt_metal7Program14set_runtime_idEm)
  if grep -qxF "$s" <<<"$syms"; then echo "ok      $s  $(c++filt "$s")"; else echo "MISSING $s"; fail=1; fi
fi

if [ "$fail" -ne 0 ]; then
  echo "check-symbols: FAILED for $lib" >&2
  exit 1
fi
echo "check-symbols: all symbols present in $lib"

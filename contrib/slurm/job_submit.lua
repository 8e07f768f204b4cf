--[[ job_submit.lua for vram (docs/slurm.md): a job submitted with
     --vram-mem=SIZE asks Slurm for that much of the countable GRES `vram`
     (MiB per node), and only for nodes whose GPUs can each hold it, so that
     slurmctld places it where the GPU memory is.

     The spank_vram plugin computes the MiB where the job is submitted and
     sends them in the job's SPANK environment: VRAM_GRES_MIB (per node: per
     GPU times GPUs) and VRAM_GPU_MIB (per GPU). This script
       - adds gres:vram:VRAM_GRES_MIB, unless the job names a vram count;
       - when some nodes' GPUs are too small, adds --constraint to the node
         features vram_per_gpu_N (N: the MiB vramd hands out on each of the
         node's GPUs, its smallest one; in slurm.conf, next to this file)
         with N >= VRAM_GPU_MIB, unless the job gives its own constraint;
       - refuses the job when no node's GPUs can hold it.
     Install: JobSubmitPlugins=lua in slurm.conf, this file next to it. ]]

local function spank_value(env, name)
   if env == nil then return nil end
   for _, entry in pairs(env) do
      local value = string.match(entry, "^" .. name .. "=(%d+)$")
      if value then return tonumber(value) end
   end
   return nil
end

-- The vram_per_gpu_N features of slurm.conf's node lines: { N = true, ... }.
local function gpu_sizes()
   local dir = string.match(debug.getinfo(1, "S").source, "^@(.*)/[^/]*$") or "."
   local f = io.open(dir .. "/slurm.conf")
   local sizes = {}
   if f == nil then return sizes end
   for line in f:lines() do
      if string.match(line, "^%s*NodeName=") then
         for n in string.gmatch(line, "vram_per_gpu_(%d+)") do sizes[tonumber(n)] = true end
      end
   end
   f:close()
   return sizes
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local env = job_desc.spank_job_env
   local mib, per_gpu = spank_value(env, "VRAM_GRES_MIB"), spank_value(env, "VRAM_GPU_MIB")
   if mib == nil then return slurm.SUCCESS end
   local tres = job_desc.tres_per_node
   if tres == nil or not string.find(tres, "gres:vram", 1, true) then
      local add = "gres:vram:" .. mib
      job_desc.tres_per_node = (tres == nil or tres == "") and add or (tres .. "," .. add)
   end
   if per_gpu ~= nil and (job_desc.features == nil or job_desc.features == "") then
      local fit, all = {}, true
      for n in pairs(gpu_sizes()) do
         if n >= per_gpu then table.insert(fit, "vram_per_gpu_" .. n) else all = false end
      end
      if #fit == 0 and not all then
         slurm.log_user("vram: no node's GPUs can hold %d MiB each (--vram-mem)", per_gpu)
         return slurm.ERROR
      end
      if not all then
         table.sort(fit)
         job_desc.features = table.concat(fit, "|")
      end
   end
   slurm.log_info("vram: job of uid %u asks %d MiB of GPU memory (gres/vram), %s",
                  submit_uid, mib, job_desc.features or "any node")
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

return slurm.SUCCESS

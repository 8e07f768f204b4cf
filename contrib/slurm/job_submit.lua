--[[ job_submit.lua for vram (docs/slurm.md): a job submitted with
     --vram-mem=SIZE asks Slurm for that much of the countable GRES `vram`
     (MiB per node), so that slurmctld places it on a node whose GPUs have the
     memory left. The spank_vram plugin computes the MiB where the job is
     submitted and sends them as VRAM_GRES_MIB in the job's SPANK
     environment; a job that already names a vram count keeps it.
     Install: JobSubmitPlugins=lua in slurm.conf, this file next to slurm.conf. ]]

local function vram_mib(env)
   if env == nil then return nil end
   for _, entry in pairs(env) do
      local mib = string.match(entry, "^VRAM_GRES_MIB=(%d+)$")
      if mib then return mib end
   end
   return nil
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   local mib = vram_mib(job_desc.spank_job_env)
   if mib == nil then return slurm.SUCCESS end
   local tres = job_desc.tres_per_node
   if tres ~= nil and string.find(tres, "gres:vram", 1, true) then return slurm.SUCCESS end
   local add = "gres:vram:" .. mib
   if tres == nil or tres == "" then
      job_desc.tres_per_node = add
   else
      job_desc.tres_per_node = tres .. "," .. add
   end
   slurm.log_info("vram: job of uid %u asks %s MiB of GPU memory (gres/vram)", submit_uid, mib)
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

return slurm.SUCCESS

import json,sys
d=json.load(open(sys.argv[1]))
for r in d['scenarios'][0]['runs']:
  L=r['links']; secs=L['secs']; rec=L['received']; sent=L['sent']; R=L['rate_bytes_per_sec']
  n=len(rec[0])
  print('N',r['replicas'],'secs',round(r['secs'],2))
  step=4
  for k in range(0,len(secs)-step,step):
    dt=secs[k+step]-secs[k]
    relay=(sent[k+step][0]-sent[k][0])/dt/R
    down=[(rec[k+step][i]-rec[k][i])/dt/R for i in range(1,n)]
    up=[(sent[k+step][i]-sent[k][i])/dt/R for i in range(1,n)]
    print('%5.1f relay %3.0f%% down avg %3.0f%% [%s] up avg %3.0f%%'%(secs[k],100*relay,100*sum(down)/len(down),' '.join('%3.0f'%(100*x) for x in down),100*sum(up)/len(up)))
